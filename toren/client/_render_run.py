"""The run's own events and its model calls, rendered from history.

RunStarted or ThreadStarted, the child runs a run started (Process*), LlmCallStarted,
LlmCallCompleted (with the tools the provider ran inside the call), LlmCallFailed for each
failed attempt (from the records `toren.agent._attempts` describes), the Receipt of what the
model calls cost, and how the run ended (RunCompleted, ThreadClosed, RunFailed, RunTimedOut,
RunCanceled, RunTerminated, RunContinuedAsNew, or WorkflowTaskFailed when a worker could not
run the workflow's code).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from temporalio.api.enums.v1 import EventType, VersioningBehavior, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent

from toren.agent._attempts import attempts_before, failure_record
from toren.client._render_core import RenderState, failure_text, pick
from toren.workflows._budget import CACHE_KEYS, cost_usd
from toren.workflows._eval_calls import EVAL_MEMO
from toren.workflows._text_calls import find_text_call

__all__ = ["MODEL_ACTIVITY", "RunEvents"]

MODEL_ACTIVITY = "toren.call_model"


class RunEvents(RenderState):
    """The run's start and end, its child runs, its model calls and their receipt."""

    version = ""
    """The Worker Deployment Version of the last completed workflow task (`name.build`)."""
    versioning = ""
    """That task's versioning behavior (`pinned`, `auto_upgrade`; `unspecified` unversioned)."""

    def _run_started(self, event: HistoryEvent) -> None:
        a = event.workflow_execution_started_event_attributes
        run_input = self._first(a.input)
        if not isinstance(run_input, dict):  # a wrong input: the run fails at once
            run_input = {"input": run_input}
        self.thread = a.workflow_type.name == "AgentThread"
        wrong = {"input": run_input["input"]} if "input" in run_input else {}
        if self.thread:
            fields = pick(run_input, "agent", "userId=user_id", "arguments")
            self.emit(event, "ThreadStarted", **fields, **wrong)
        else:
            fields = pick(run_input, "agent", "prompt", "arguments", "attachments")
            fork = run_input.get("fork")
            if isinstance(fork, dict):  # `toren fork`: where this run's conversation comes from
                messages = run_input.get("messages") or []
                self.inherited = sum(
                    1 for m in messages if isinstance(m, dict) and m.get("role") == "tool"
                )
                origin = pick(fork, "runId=run_id", "step", "execution")
                fields["forkedFrom"] = {k: v for k, v in origin.items() if v is not None}
            replay = run_input.get("eval")
            if isinstance(replay, dict):  # `toren eval`: which recorded run this re-runs
                fields["evalOf"] = replay.get("run_id")
            self.emit(event, "RunStarted", **fields, **wrong)

    def _task_completed(self, event: HistoryEvent) -> None:
        """Note the Worker Deployment Version that completed the task (empty: unversioned)."""
        a = event.workflow_task_completed_event_attributes
        version = a.deployment_version
        self.version = f"{version.deployment_name}.{version.build_id}" if version.build_id else ""
        behavior = VersioningBehavior.Name(a.versioning_behavior)
        self.versioning = behavior.removeprefix("VERSIONING_BEHAVIOR_").lower()

    def _agent_loaded(self, event: HistoryEvent, spec: dict[str, Any]) -> None:
        """AgentLoaded: the definition each run of a chain recorded, and the version it ran on.

        HandedOff first when the run loads another agent than its last (`handoffs:`): the
        reason is the argument of the `transfer_to_<agent>` call in the model's last reply.
        """
        fields: dict[str, Any] = {"agent": spec.get("name"), "model": spec.get("model")}
        previous, self.agent = self.agent, spec.get("name")
        if previous and previous != self.agent:
            call = next(
                (
                    c
                    for c in self.model_calls.values()
                    if c.get("name") == f"transfer_to_{self.agent}"
                ),
                {},
            )
            args = call.get("arguments")
            with contextlib.suppress(ValueError):
                args = json.loads(args) if isinstance(args, str) else args
            reason = args.get("reason") if isinstance(args, dict) else None
            self.emit(event, "HandedOff", **{"from": previous, "to": self.agent, "reason": reason})
        if spec.get("digest"):
            fields["digest"] = spec["digest"]
        if self.version:
            fields["version"] = self.version
            fields["versioning"] = self.versioning
        self.emit(event, "AgentLoaded", **fields)

    def _lifecycle(self, event: HistoryEvent) -> None:
        """How the run ended, and the child runs it started (other events are not the run's)."""
        t = event.event_type
        if t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            child = event.start_child_workflow_execution_initiated_event_attributes
            self.emit(
                event,
                "ProcessStarted",
                runId=child.workflow_id,
                workflow=child.workflow_type.name,
                taskQueue=child.task_queue.name,
            )
        elif t == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            done_child = event.child_workflow_execution_completed_event_attributes
            output = self._first(done_child.result)
            if isinstance(output, dict) and "text" in output:
                output = output["text"]
            self.emit(
                event,
                "ProcessCompleted",
                runId=done_child.workflow_execution.workflow_id,
                output=output,
            )
        elif t == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED:
            failed_child = event.child_workflow_execution_failed_event_attributes
            self.emit(
                event,
                "ProcessFailed",
                runId=failed_child.workflow_execution.workflow_id,
                error=failure_text(failed_child.failure),
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            self._run_completed(event)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            kind = (
                failure.application_failure_info.type
                if failure.HasField("application_failure_info")
                else ""
            )
            self._receipt(event)
            self.emit(event, "RunFailed", error=failure_text(failure), kind=kind)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            self.emit(event, "RunTimedOut", error="workflow execution timeout reached")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            self.emit(event, "RunCanceled")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            terminated = event.workflow_execution_terminated_event_attributes
            self.emit(event, "RunTerminated", reason=terminated.reason, by=terminated.identity)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            # The worker could not run the workflow's code (a bug, a nondeterminism): the run
            # is stuck retrying it, which must not look like a healthy run that waits.
            task_failed = event.workflow_task_failed_event_attributes
            self.emit(
                event,
                "WorkflowTaskFailed",
                cause=WorkflowTaskFailedCause.Name(task_failed.cause).removeprefix(
                    "WORKFLOW_TASK_FAILED_CAUSE_"
                ),
                message=failure_text(task_failed.failure),
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            memo = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            if EVAL_MEMO in memo:
                try:
                    body = self.converter.from_payloads([memo[EVAL_MEMO]])[0]
                except Exception:
                    body = None
                self._eval_answered(event, body)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            continued = event.workflow_execution_continued_as_new_event_attributes
            self.emit(event, "RunContinuedAsNew", newRunId=continued.new_execution_run_id)

    def _eval_answered(self, event: HistoryEvent, body: Any) -> None:
        """EvalAnswered: how an eval run answered a call (`toren.workflows._eval_calls`).

        A recorded decision it took without waiting is an ApprovalResolved `via: eval` too.
        """
        if not isinstance(body, dict):
            return
        decision = body.get("decision")
        if isinstance(decision, dict):
            self.emit(
                event, "ApprovalResolved", callId=body.get("call_id"),
                approved=bool(decision.get("approved")), by=decision.get("by"),
                comment=decision.get("comment", ""), via="eval", identity="",
            )  # fmt: skip
        self.emit(
            event, "EvalAnswered", callId=body.get("call_id"), tool=body.get("tool"),
            answer=body.get("answer"), recordedIndex=body.get("index"),
        )  # fmt: skip

    def _run_completed(self, event: HistoryEvent) -> None:
        result = self._first(event.workflow_execution_completed_event_attributes.result)
        result = result if isinstance(result, dict) else {"text": result}
        self._text_call_kept(event)
        self._receipt(event)
        if "closed_by" in result:
            self.emit(
                event,
                "ThreadClosed",
                **pick(result, "executions", "messages", "closedBy=closed_by", "usage"),
            )
        else:
            self.emit(
                event,
                "RunCompleted",
                **pick(result, "text", "steps", "toolCalls=tool_calls", "usage"),
                **({"costUSD": result["cost_usd"]} if result.get("cost_usd") is not None else {}),
                **({"output": result["output"]} if result.get("output") is not None else {}),
            )

    # -- model calls ----------------------------------------------------------------------

    def _model_scheduled(self, event: HistoryEvent, info: dict[str, Any]) -> None:
        a = event.activity_task_scheduled_event_attributes
        info["max_attempts"] = a.retry_policy.maximum_attempts or None  # 0: unlimited
        self.text_call = None  # the model is asked again: the run did not end with it
        self._compacted(event, info)
        self.emit(event, "LlmCallStarted", step=info.get("step"), model=info.get("model"))

    def _compacted(self, event: HistoryEvent, info: dict[str, Any]) -> None:
        """`ContextCompacted`, once, before the first call whose prompt a compaction shortened.

        The run records each compaction in its plan, which rides in the next call's input with
        a `compacted` note (`toren.workflows._context_window`).
        """
        note = (info.get("context") or {}).get("compacted")
        if isinstance(note, dict):
            self.emit(
                event, "ContextCompacted", tokensBefore=note.get("tokens_before"),
                tokensAfter=note.get("tokens_after"), messagesFolded=note.get("messages_folded"),
                elided=note.get("elided"), summary=note.get("summary") or None,
            )  # fmt: skip

    def _model_started(self, event: HistoryEvent) -> None:
        # Written when the call ends, for its last attempt: the failed ones come before it.
        a = event.activity_task_started_event_attributes
        info = self.scheduled.get(a.scheduled_event_id)
        if info is None or info["name"] != MODEL_ACTIVITY:
            return
        info["attempt"] = a.attempt
        for record in attempts_before(a, self._decode):
            self._model_attempt_failed(event, info, record)

    def _count(self, usage: dict[str, Any], earlier: dict[str, Any]) -> float | None:
        """Add a model call to the receipt; its cost, when the run recorded prices.

        Tokens read from or written to the provider's prompt cache are part of the input and
        priced at their own rates (`toren.workflows._budget.cost_usd`).
        """
        receipt = self.receipt
        receipt["calls"] += 1
        tokens = {
            k: int(usage.get(k, 0) or 0) + int(earlier.get(k, 0) or 0)
            for k in ("input_tokens", "output_tokens", *CACHE_KEYS)
        }
        receipt["inputTokens"] += tokens["input_tokens"]
        receipt["outputTokens"] += tokens["output_tokens"]
        for key, name in zip(CACHE_KEYS, ("cacheReadTokens", "cacheWriteTokens"), strict=True):
            if tokens[key]:
                receipt[name] = receipt.get(name, 0) + tokens[key]
        if not self.prices:
            return None
        cost = cost_usd(tokens, list(self.prices))
        receipt["costUSD"] = (receipt.get("costUSD") or 0.0) + cost
        return cost

    def _receipt(self, event: HistoryEvent) -> None:
        """What this run's model calls cost, once, where the run ends."""
        receipt = dict(self.receipt)
        if "costUSD" in receipt:
            receipt["costUSD"] = round(receipt["costUSD"], 6)
        self.emit(event, "Receipt", **receipt)

    def _model_attempt_failed(
        self, event: HistoryEvent, info: dict[str, Any], record: dict[str, Any]
    ) -> None:
        self.receipt["retries"] += 1
        self.emit(
            event,
            "LlmCallFailed",
            step=info.get("step"),
            attempt=record.get("attempt"),
            maxAttempts=info.get("max_attempts"),
            status=record.get("status"),
            error=record.get("error"),
            **({"at": record["at"]} if record.get("at") else {}),
        )

    def _model_completed(
        self, event: HistoryEvent, info: dict[str, Any], result: dict[str, Any]
    ) -> None:
        message = result.get("message") or {}
        self.model_calls = {c.get("id", ""): c for c in message.get("tool_calls") or []}
        usage = result.get("usage") or {}
        earlier = result.get("earlier_usage") or {}
        cost = self._count(usage, earlier)
        self.emit(
            event,
            "LlmCallCompleted",
            step=info.get("step"),
            attempt=info["attempt"] if info.get("attempt", 1) > 1 else None,
            text=message.get("content", ""),
            toolCalls=message.get("tool_calls", []),
            usage=usage,
            # Billed to attempts that died after the provider answered (budgeted agents).
            **({"earlierUsage": earlier} if earlier else {}),
            **({"costUSD": round(cost, 6)} if cost is not None else {}),
            # `length`: cut at maxTokens (the model is told when it cut a tool call).
            finishReason=result.get("finish_reason") or None,
        )
        found = None
        if not message.get("tool_calls") and not self.typed:
            found = find_text_call(str(message.get("content") or ""), self.schemas)
        self.text_call = dataclasses.asdict(found) if found else None
        # Tools the provider ran inside this call: logged like any call, by whom they ran.
        for call in message.get("provider_calls") or []:
            args = call.get("arguments")
            with contextlib.suppress(ValueError):
                args = json.loads(args) if isinstance(args, str) else args
            who = call.get("provider")
            self.emit(
                event, "ToolCallStarted", callId=call.get("id"), tool=call.get("name"),
                args=args, provider=who, step=info.get("step"),
            )  # fmt: skip
            self.emit(
                event, "ToolCallCompleted", callId=call.get("id"), tool=call.get("name"),
                result=call.get("result"), isError=bool(call.get("is_error")), provider=who,
            )  # fmt: skip

    def _model_failed(
        self, event: HistoryEvent, info: dict[str, Any], error: str, failure: Any
    ) -> None:
        own = failure_record(failure, self._decode)[-1:] if failure is not None else []
        last = {**(own[0] if own else {}), "attempt": info.get("attempt"), "error": error}
        last.pop("at", None)  # the history's own time of the failure
        self._model_attempt_failed(event, info, last)
