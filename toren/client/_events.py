"""A run's Temporal history rendered as Toren's event log.

```python
history = await client.get_workflow_handle(run_id).fetch_history()
for event in render(history):
    print(event["type"], event)
```

Event types: RunStarted (ThreadStarted for a thread, then MessageReceived and MessageAnswered
per message, ThreadCloseRequested, ThreadClosed), LlmCallStarted, LlmCallCompleted,
LlmCallFailed (one per failed attempt, from the records `toren.agent._attempts` describes),
ToolCallStarted (for a local tool call, dated when it started, not when its marker was written;
for a tool the model's provider ran, with `provider`, right after the LlmCallCompleted whose
reply carried it), ToolCallCompleted (with attachments by name and id), ToolCallFailed,
ApprovalRequested, ApprovalResolved, SignalRefused, and what tools did through their context:
ToolInvoked, StateSet, ToolEvent, ToolQueued, MessageInjected; then Receipt (model calls,
failed attempts, tokens, cost) and RunCompleted or RunFailed (also RunTimedOut, RunCanceled,
RunTerminated, RunContinuedAsNew);
WorkflowTaskFailed when a worker could not run the workflow's code. Nothing here is stored twice:
the log is derived from the history, which stays the one source of truth. Payloads an offloading
store holds are read first with `read_through`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, PayloadConverter
from temporalio.converter import default as default_converter

from toren.agent._attempts import attempts_before, failure_record
from toren.agent._context_plan import COMPACT_ACTIVITY
from toren.agent._sdk_private import transform_inbound_payload
from toren.client._compaction_events import emit_compacted
from toren.errors import CodecServerError
from toren.workflows._agent_thread import THREAD_SIGNALS, message_problem
from toren.workflows._approvals import SIGNALS, decision_problem, unknown_signal_problem

STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The signal that carries a batch of live output (`temporalio.contrib.workflow_streams`)."""

__all__ = ["Event", "EventStream", "format_event", "payloads_in", "read_through", "render"]

Event = dict[str, Any]

_CONVERTER = default_converter().payload_converter


def _decode(payloads: Payloads | None, converter: PayloadConverter) -> list[Any]:
    if payloads is None or not payloads.payloads:
        return []
    try:
        return list(converter.from_payloads(list(payloads.payloads)))
    except Exception:
        return ["<undecodable payload>"]


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every `Payload` inside a history event, however deep.

    Inputs, results, failures and their details, marker details, heartbeat details.
    """
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if isinstance(value, Message):
            items: Iterable[Any] = [value]
        elif hasattr(value, "items"):  # a map field
            items = value.values()
        else:  # a repeated field
            items = value
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


async def read_through(events: Iterable[HistoryEvent], converter: DataConverter) -> None:
    """Replace, in place, each payload of `events` by what it stands for.

    That is the payload store's copy of an offloaded one, decoded by the converter's codec.

    `render` decodes payloads itself without I/O; this is the I/O it needs first, done with the
    client's converter, so a run whose results went to the store renders whole.
    """
    for event in events:
        for payload in list(payloads_in(event)):
            try:
                # The SDK's own inbound step (reference → store → codec); it has no public
                # per-payload form that keeps the payload (`decode` returns values).
                payload.CopyFrom(await transform_inbound_payload(converter, payload))
            except CodecServerError:
                raise  # the codec server the settings name is down or refused: say so
            except Exception:  # unreadable here (no store, a missing key): render says so
                continue


def _pick(source: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Fields of an event taken from `source`, in order: `"key"`, or `"eventKey=source_key"`."""
    fields = {}
    for key in keys:
        name, _, source_key = key.partition("=")
        fields[name] = source.get(source_key or name)
    return fields


def _timestamp_text(value: Any) -> str:
    """A marker's protobuf timestamp (`{"seconds": .., "nanos": ..}` or RFC 3339) as `at` text."""
    if isinstance(value, str):
        return value if value.endswith("Z") else value + "Z"
    at = datetime.fromtimestamp(
        int(value.get("seconds", 0)) + int(value.get("nanos", 0)) / 1e9, UTC
    ).replace(tzinfo=None)
    return at.isoformat() + "Z"


def _failure_text(failure: Any) -> str:
    text: str = failure.message
    cause = failure.cause if failure.HasField("cause") else None
    while cause is not None and cause.message:
        text += f": {cause.message}"
        cause = cause.cause if cause.HasField("cause") else None
    return text


class _Renderer:
    def __init__(self, converter: PayloadConverter | None = None) -> None:
        self.converter = converter or _CONVERTER
        self.events: list[Event] = []
        self.scheduled: dict[int, dict[str, Any]] = {}
        self.effects: dict[str, str] = {}
        self.pending: set[str] = set()
        self.model_calls: dict[str, dict[str, Any]] = {}
        self.decided: set[str] = set()
        self.workflow_id = ""
        self.prices: list[float] | None = None
        """USD per million input and output tokens, from the run's recorded spec."""
        self.receipt: dict[str, Any] = {
            "calls": 0,
            "retries": 0,
            "inputTokens": 0,
            "outputTokens": 0,
        }
        """The run's model calls as billed: answered calls, failed attempts, tokens, cost.
        Each is recorded once in history, so a replay never pays for it again."""
        self.thread = False
        """Whether the history is an `AgentThread`'s (it takes messages and `close`)."""

    def _decode(self, payloads: Payloads | None) -> list[Any]:
        return _decode(payloads, self.converter)

    def _first(self, payloads: Payloads | None) -> Any:
        values = self._decode(payloads)
        return values[0] if values else None

    def emit(self, source: HistoryEvent, type_: str, **fields: Any) -> None:
        self.events.append(
            {"type": type_, "at": source.event_time.ToDatetime().isoformat() + "Z", **fields}
        )

    def handle(self, event: HistoryEvent) -> None:
        t = event.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            a = event.workflow_execution_started_event_attributes
            run_input = self._first(a.input)
            if not isinstance(run_input, dict):  # a wrong input: the run fails at once
                run_input = {"input": run_input}
            self.thread = a.workflow_type.name == "AgentThread"
            if self.thread:
                self.emit(
                    event,
                    "ThreadStarted",
                    **_pick(run_input, "agent", "userId=user_id", "arguments"),
                    **({"input": run_input["input"]} if "input" in run_input else {}),
                )
            else:
                self.emit(
                    event,
                    "RunStarted",
                    **_pick(run_input, "agent", "prompt", "arguments", "attachments"),
                    **({"input": run_input["input"]} if "input" in run_input else {}),
                )
        elif t == EventType.EVENT_TYPE_MARKER_RECORDED:
            self._marker(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self._scheduled(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            self._started(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            info = self.scheduled.get(done.scheduled_event_id)
            self._completed(event, info, self._first(done.result))
        elif t in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            if t == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                failed = event.activity_task_failed_event_attributes
                scheduled_id, failure = failed.scheduled_event_id, failed.failure
            else:
                timed_out = event.activity_task_timed_out_event_attributes
                scheduled_id, failure = timed_out.scheduled_event_id, timed_out.failure
            self._failed(event, self.scheduled.get(scheduled_id), _failure_text(failure), failure)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            values = self._decode(signaled.input)
            self._signal(event, signaled.signal_name, values, signaled.identity)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "send_message":
                body = self._first(request.input.args)
                self._message(event, body, request.meta.update_id, "update")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            update = event.workflow_execution_update_completed_event_attributes
            if update.outcome.HasField("success"):
                outcome = self._first(update.outcome.success)
                if isinstance(outcome, dict) and "approved" in outcome:
                    self._resolved(event, outcome)
                elif isinstance(outcome, dict) and "message_id" in outcome:
                    self._answered(event, outcome)
            elif update.outcome.HasField("failure"):
                details = update.outcome.failure.application_failure_info.details
                outcome = self._first(details)
                if isinstance(outcome, dict) and "message_id" in outcome:
                    self._answered(event, outcome)
        elif t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
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
                error=_failure_text(failed_child.failure),
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            result = self._first(event.workflow_execution_completed_event_attributes.result)
            result = result if isinstance(result, dict) else {"text": result}
            self._receipt(event)
            if "closed_by" in result:
                self.emit(
                    event,
                    "ThreadClosed",
                    **_pick(result, "executions", "messages", "closedBy=closed_by", "usage"),
                )
            else:
                self.emit(
                    event,
                    "RunCompleted",
                    **_pick(result, "text", "steps", "toolCalls=tool_calls", "usage"),
                    **(
                        {"costUSD": result["cost_usd"]}
                        if result.get("cost_usd") is not None
                        else {}
                    ),
                )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            kind = (
                failure.application_failure_info.type
                if failure.HasField("application_failure_info")
                else ""
            )
            self._receipt(event)
            self.emit(event, "RunFailed", error=_failure_text(failure), kind=kind)
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
                message=_failure_text(task_failed.failure),
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            continued = event.workflow_execution_continued_as_new_event_attributes
            self.emit(event, "RunContinuedAsNew", newRunId=continued.new_execution_run_id)

    def _marker(self, event: HistoryEvent) -> None:
        a = event.marker_recorded_event_attributes
        if a.marker_name != "core_local_activity":
            return
        meta = self._first(a.details["data"]) if "data" in a.details else None
        result = self._first(a.details["result"]) if "result" in a.details else None
        kind = meta.get("activity_type") if isinstance(meta, dict) else None
        if kind == "toren.agent_spec" and isinstance(result, dict):
            self.effects = {t["name"]: t.get("effects", "") for t in result.get("tools", [])}
            self.prices = result.get("prices")

        elif kind and "." in kind and not kind.startswith("toren."):
            self._local_tool(event, kind.split(".", 1)[1], result, a)
        elif (
            kind == "toren.check_approval"
            and isinstance(result, dict)
            and result.get("gated")
            and not result.get("error")
        ):
            self.pending.add(result.get("call_id", ""))
            self.emit(
                event, "ApprovalRequested", **_pick(result, "callId=call_id", "tool", "reason")
            )

    def _local_tool(self, event: HistoryEvent, tool: str, result: Any, marker: Any) -> None:
        # A local activity's marker records its result, not its input: the call's args come
        # from the model's answer that asked for it (the result names the call).
        call_id = result.get("call_id") if isinstance(result, dict) else None
        call = self.model_calls.get(call_id or "", {})
        args = call.get("arguments")
        with contextlib.suppress(ValueError):
            args = json.loads(args) if isinstance(args, str) else args
        self.emit(
            event,
            "ToolCallStarted",
            callId=call_id,
            tool=tool,
            args=args,
            effects=self.effects.get(tool, ""),
            local=True,
        )
        # The marker is written when the call ends; its data says when the call was scheduled,
        # which is when the workflow started it (local activities do not wait in a queue).
        meta = self._first(marker.details["data"]) if "data" in marker.details else None
        scheduled = meta.get("original_schedule_time") if isinstance(meta, dict) else None
        if scheduled:
            self.events[-1]["at"] = _timestamp_text(scheduled)
        info = {"name": f"local.{tool}", "call_id": call_id}
        if isinstance(result, dict):
            self._completed(event, info, result)
        elif marker.HasField("failure"):
            self._failed(event, info, _failure_text(marker.failure))

    def _scheduled(self, event: HistoryEvent) -> None:
        a = event.activity_task_scheduled_event_attributes
        name = a.activity_type.name
        body = self._first(a.input)
        body = body if isinstance(body, dict) else {}
        info = {"name": name, **body}
        self.scheduled[event.event_id] = info
        if name == "toren.call_model":
            info["max_attempts"] = a.retry_policy.maximum_attempts or None  # 0: unlimited
            emit_compacted(self.emit, event, body)  # issue 39
            for item in body.get("tail", []):
                message = item.get("message") if isinstance(item, dict) else None
                if isinstance(message, dict) and message.get("role") == "tool":
                    self._workflow_result(event, message)
            self.emit(event, "LlmCallStarted", step=body.get("step"), model=body.get("model"))
        elif "." in name and not name.startswith("toren."):
            tool = name.split(".", 1)[1]
            self.emit(
                event,
                "ToolCallStarted",
                callId=body.get("call_id"),
                tool=tool,
                args=body.get("args"),
                idempotencyKey=body.get("idempotency_key"),
                effects=self.effects.get(tool, ""),
                step=body.get("step"),
            )

    def _started(self, event: HistoryEvent) -> None:
        # Written when the call ends, for its last attempt: the failed ones come before it.
        a = event.activity_task_started_event_attributes
        info = self.scheduled.get(a.scheduled_event_id)
        if info is None or info["name"] != "toren.call_model":
            return
        info["attempt"] = a.attempt
        for record in attempts_before(a, self._decode):
            self._model_attempt_failed(event, info, record)

    def _count(self, usage: dict[str, Any], earlier: dict[str, Any]) -> float | None:
        """Add a model call to the receipt; its cost, when the run recorded prices."""
        receipt = self.receipt
        receipt["calls"] += 1
        tokens = {
            k: int(usage.get(k, 0) or 0) + int(earlier.get(k, 0) or 0)
            for k in ("input_tokens", "output_tokens")
        }
        receipt["inputTokens"] += tokens["input_tokens"]
        receipt["outputTokens"] += tokens["output_tokens"]
        if not self.prices:
            return None
        cost = (
            tokens["input_tokens"] * self.prices[0] + tokens["output_tokens"] * self.prices[1]
        ) / 1_000_000
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

    def _workflow_result(self, event: HistoryEvent, message: dict[str, Any]) -> None:
        call_id = message.get("tool_call_id")
        content = str(message.get("content", ""))
        if (
            call_id in self.pending
            and call_id not in self.decided
            and content.startswith("denied by ")
        ):
            by, _, comment = content[len("denied by ") :].partition(": ")
            self._resolved(
                event,
                {
                    "call_id": call_id,
                    "approved": False,
                    "by": by,
                    "comment": comment,
                    "via": "expiry" if by == "toren" else "signal",
                },
            )
        self.emit(
            event,
            "ToolCallCompleted",
            callId=call_id,
            tool=message.get("name"),
            result=content,
            isError=bool(message.get("is_error")),
        )

    def _completed(self, event: HistoryEvent, info: dict[str, Any] | None, result: Any) -> None:
        if info is None or not isinstance(result, dict):
            return
        if info["name"] == "toren.call_model":
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
        elif info["name"] == COMPACT_ACTIVITY:  # issue 39: a summary is a paid model call
            self._count(result.get("usage") or {}, result.get("earlier_usage") or {})
        elif "." in info["name"] and not info["name"].startswith("toren."):
            tool = info["name"].split(".", 1)[1]
            changes = result.get("changes") or {}
            for inv in changes.get("invoked") or []:
                self.emit(
                    event,
                    "ToolInvoked",
                    **_pick(inv, "tool"),
                    by=tool,
                    **_pick(inv, "args", "result"),
                    isError=bool(inv.get("is_error")),
                )
            self.emit(
                event,
                "ToolCallCompleted",
                callId=info.get("call_id"),
                tool=tool,
                result=result.get("content"),
                isError=bool(result.get("is_error")),
                attachments=changes.get("attachments") or None,
            )
            if changes.get("state"):
                self.emit(event, "StateSet", tool=tool, values=changes["state"])
            for emitted in changes.get("events") or []:
                self.emit(event, "ToolEvent", tool=tool, **_pick(emitted, "name=event", "data"))
            for queued in changes.get("queued") or []:
                self.emit(
                    event, "ToolQueued", by=tool, tool=queued.get("name"), args=queued.get("args")
                )
            for message in changes.get("messages") or []:
                self.emit(event, "MessageInjected", by=tool, **_pick(message, "role", "content"))

    def _failed(
        self, event: HistoryEvent, info: dict[str, Any] | None, error: str, failure: Any = None
    ) -> None:
        if info is None:
            return
        if info["name"] == "toren.call_model":
            own = failure_record(failure, self._decode)[-1:] if failure is not None else []
            last = {**(own[0] if own else {}), "attempt": info.get("attempt"), "error": error}
            last.pop("at", None)  # the history's own time of the failure
            self._model_attempt_failed(event, info, last)
        elif "." in info["name"] and not info["name"].startswith("toren."):
            self.emit(
                event,
                "ToolCallFailed",
                callId=info.get("call_id"),
                tool=info["name"].split(".", 1)[1],
                error=error,
            )

    def _message(self, event: HistoryEvent, body: Any, message_id: str, via: str) -> None:
        """A message sent to a thread (the update was accepted, or the signal arrived)."""
        body = body if isinstance(body, dict) else {}
        self.emit(
            event,
            "MessageReceived",
            messageId=body.get("id") or message_id,
            content=body.get("content"),
            attachments=body.get("attachments"),
            via=via,
        )

    def _answered(self, event: HistoryEvent, outcome: dict[str, Any]) -> None:
        if outcome.get("continued"):
            return  # the next run of the chain answers it
        self.emit(
            event,
            "MessageAnswered",
            messageId=outcome["message_id"],
            **_pick(outcome, "status", "text", "error", "steps", "toolCalls=tool_calls", "usage"),
        )

    def _signal(self, event: HistoryEvent, name: str, values: list[Any], identity: str) -> None:
        if name == STREAM_PUBLISH_SIGNAL:
            return  # live output (`toren.worker._live`), not an event of the run
        if name in THREAD_SIGNALS and self.thread:
            problem = message_problem(values) if name == "send_message" else None
            if problem is not None:
                self.emit(event, "SignalRefused", signal=name, payload=values, reason=problem)
            elif name == "send_message":
                self._message(event, values[0], "", "signal")
            else:
                closing = values[0] if values and isinstance(values[0], dict) else {}
                self.emit(event, "ThreadCloseRequested", by=closing.get("by") or identity)
            return
        if name not in SIGNALS:
            self.emit(
                event,
                "SignalRefused",
                signal=name,
                payload=values,
                reason=unknown_signal_problem(name),
            )
            return
        body = values[0] if len(values) == 1 else None
        if len(values) != 1:
            what = "an empty payload" if not values else f"{len(values)} values"
            reason: str | None = f"expected one JSON object, got {what}"
        else:
            reason = decision_problem(body, self.pending, self.decided)
        if reason is not None or not isinstance(body, dict):
            self.emit(event, "SignalRefused", signal=name, payload=values, reason=reason)
            return
        self._resolved(
            event,
            {
                "call_id": body["call_id"],
                "approved": name == "approve",
                # Who decided: the payload's `by`, else the sender Temporal recorded.
                "by": body.get("by") or identity or "unknown",
                "comment": body.get("comment") or "",
                "via": "signal",
                "identity": identity,
            },
        )

    def _resolved(self, event: HistoryEvent, decision: dict[str, Any]) -> None:
        call_id = decision.get("call_id", "")
        self.decided.add(call_id)
        self.emit(
            event,
            "ApprovalResolved",
            callId=call_id,
            approved=bool(decision.get("approved")),
            by=decision.get("by"),
            comment=decision.get("comment", ""),
            via=decision.get("via", ""),
            identity=decision.get("identity", ""),
        )


class EventStream:
    """Renders history events one at a time, for following a live run."""

    def __init__(self, converter: DataConverter | None = None) -> None:
        self._converter = converter or default_converter()
        self._renderer = _Renderer(self._converter.payload_converter)

    async def feed(self, event: HistoryEvent) -> list[Event]:
        """Take one history event; return the log events it produced (often none)."""
        await read_through([event], self._converter)
        before = len(self._renderer.events)
        self._renderer.handle(event)
        return self._renderer.events[before:]


def render(
    history: WorkflowHistory | Iterable[HistoryEvent], converter: PayloadConverter | None = None
) -> list[Event]:
    """Render a run's history (one run, or several runs of a chain in order) as events.

    Offloaded payloads must be read first (`read_through`); `converter` is the client's
    payload converter (default: Temporal's).
    """
    renderer = _Renderer(converter)
    events: Sequence[HistoryEvent] | Iterable[HistoryEvent] = (
        history.events if isinstance(history, WorkflowHistory) else history
    )
    for event in events:
        renderer.handle(event)
    return renderer.events


def format_event(event: Event) -> str:
    """One line for a terminal: time, type, and the fields that matter."""
    at = str(event.get("at", ""))[11:23]
    fields = {k: v for k, v in event.items() if k not in ("type", "at") and v not in (None, "")}
    parts = []
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > 200:
            text = text[:197] + "…"
        parts.append(
            f"{key}={text}"
            if isinstance(value, str) and " " not in text
            else f"{key}={json.dumps(text) if isinstance(value, str) else text}"
        )
    return f"{at}  {event['type']:<18} " + " ".join(parts)
