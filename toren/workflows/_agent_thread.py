"""The `AgentThread` workflow: a conversation that lives on and runs an execution per message.

```text
start {"agent": "support", "user_id": "alice"}      (workflow id = the thread id)
update send_message {"content": "..."} -> {"message_id", "status": "completed", "text", ...}
signal send_message {"content": "..."}              (queued; nothing waits for it)
signal close {"by": "alice"}                         (ends it once the running execution ends)
signal upgrade                                       (at rest on an old version: move now)
query  messages(start, limit) / execution() / pending_approvals() / ...
```

An execution is `AgentRun`'s own loop (the same tools, approvals, budgets and handlers: this
class inherits them) over the thread's transcript, which grows by one user message per
execution; the message handlers (`send_message`, `wait_result`, `close`) are `_thread_inbox`'s.
Messages run one at a time, in order of arrival. At rest the thread is a workflow waiting on a
condition: no activity, no timer but the idle timeout. It continues as new at rest once its
history is long (or mid-execution like an `AgentRun`), with the conversation by reference, so
each run's history stays flat however long the conversation gets. On a versioned worker
(`toren.connect._deployment`) the thread is pinned; it continues as new at rest onto the
deployment's current version once that is no longer its own, so the next message runs on the
new code while an execution in progress always finishes on the version it began on.

A caller of `send_message` gets the execution's outcome. When the thread continues as new in
the middle of that execution, the update answers `{"status": "running", "continued": true}`
instead, and the caller asks the new run with the update `wait_result(message_id)` (toren's
client does this for you).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from toren.agent._transcript import TranscriptRef
    from toren.agent._types import (
        RunInput,
        RunResult,
        RunState,
        ThreadCarry,
        ThreadInput,
        ThreadMessage,
        ThreadResult,
    )
    from toren.errors import InvalidJSONPayloadError, RunError
    from toren.workflows._agent_run import AgentRun, toren_bug
    from toren.workflows._background import Background
    from toren.workflows._budget import Budget, fresh_spending
    from toren.workflows._handoff import mark_agents
    from toren.workflows._input import naming_attachments, one_raw_input, parse_thread_input
    from toren.workflows._origin import provenance
    from toren.workflows._output import output_item
    from toren.workflows._race import unless
    from toren.workflows._thread_inbox import ThreadInbox
    from toren.workflows._tool_calls import ToolCalls

__all__ = ["AgentThread"]

REST_CONTINUE_EVENTS = 1_000
"""At rest, continue as new past this many history events (or `continueAsNewAfterEvents`)."""
KEPT_RESULTS = 20
"""Outcomes of the latest executions kept for late callers of `wait_result`."""


# Pinned like a run on a versioned worker (see `AgentRun`), so an execution finishes on the
# version it began on; at rest it moves onto the deployment's current version (`_serve`).
@workflow.defn(name="AgentThread", failure_exception_types=[InvalidJSONPayloadError])
class AgentThread(ThreadInbox, AgentRun):
    """A conversation with an agent: start it once, then `send_message` for each message."""

    _thread_input: ThreadInput
    _STREAM_PATH = ("carry", "run", "stream")

    @workflow.init
    @one_raw_input
    def __init__(self, *args: RawValue) -> None:
        super().__init__(*args)
        # Messages may arrive (signal or update) before `run` starts; they queue here.
        self._thread = ThreadCarry(run=self._run)
        self._continuing = False
        """Set just before continuing as new: waiting callers are told to ask the next run."""
        self._kept: str | None = None
        """Where this run kept the whole transcript before moving to a new version."""

    # -- the thread -----------------------------------------------------------------------

    @workflow.run
    @one_raw_input
    async def run(self, *args: RawValue) -> ThreadResult:  # type: ignore[override]
        """Answer messages one execution at a time until `close` or the idle timeout."""
        try:
            return await self._serve(parse_thread_input(self._start.check("AgentThread")))
        except (ApplicationError, CancelledError):
            raise
        except Exception as err:
            raise toren_bug(err, "AgentThread") from err

    async def _serve(self, input: ThreadInput) -> ThreadResult:
        self._thread_input = input
        if input.carry is not None:
            carry = input.carry
            known = {m.id for m in carry.queue}
            carry.queue += [m for m in self._thread.queue if m.id not in known]
            carry.run.refused.extend(self._run.refused)
            if self._thread.closing and not carry.closing:
                carry.closing = self._thread.closing
            self._thread = carry
            self._run = carry.run
        else:
            self._thread.idle_since = workflow.now().isoformat()
        self._transcript = TranscriptRef(self._run.messages, self._run.prior)
        self._budget = Budget(self._run)
        # Never trust a policy from input: every run of the chain records the spec again.
        self._run.spec = await self._load_spec(self._run.agent or input.agent)
        self._background = Background(self._run, self._budget.add_child)
        self._input = self._execution_input(None)
        self._calls = ToolCalls(
            self._run, self._input, self._approvals, self._background, publish=self.publish
        )
        self._approvals.publish()
        self._sync_status()
        thread = self._thread
        while True:
            if not thread.running and not thread.closing and self._behind_current_version():
                # Between two messages: the next one runs on the current version's code.
                await self._continue_as_new(upgrade=True)
            if thread.queue and (thread.running or not thread.closing):
                await self._execute_message(thread.queue[0])
                continue
            if thread.closing:
                break
            if self._rest_is_long():
                await self._continue_as_new(upgrade=True)
            if not await self._rest():
                thread.closing = "idle"
        for message in thread.queue:
            self._finish(
                message,
                {
                    "status": "failed",
                    "error": "the thread was closed before this message ran",
                    "kind": "ThreadClosed",
                },
            )
        thread.queue.clear()
        self.publish("thread_closed", {"closed_by": thread.closing or "close"})
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._sync_status("completed")
        return ThreadResult(
            executions=self._run.execution,
            messages=self._transcript.count,
            closed_by=thread.closing or "close",
            usage=dict(self._run.usage),
        )

    async def _rest(self) -> bool:
        """Wait for a message or `close`; `False` when the idle timeout ran out first."""
        minutes = self._spec.thread_idle_timeout_min
        timeout = None
        if minutes is not None:
            idle_since = datetime.fromisoformat(self._thread.idle_since)
            left = idle_since + timedelta(minutes=minutes) - workflow.now()
            timeout = max(left, timedelta(milliseconds=1))
        try:
            # Behind the current version: any task ends the rest (an `upgrade` signal is one),
            # and the thread moves at once instead of keeping the old version's workers busy.
            await workflow.wait_condition(
                lambda: (
                    bool(self._thread.queue)
                    or bool(self._thread.closing)
                    or self._behind_current_version()
                ),
                timeout=timeout,
                timeout_summary="thread idle timeout",
            )
        except TimeoutError:
            return False
        return True

    def _behind_current_version(self) -> bool:
        """Whether the deployment's current version is no longer the one this run is on.

        Temporal says so with each workflow task of a run started before the change (so a
        thread at rest learns it when its next message arrives), and a run that continued as
        new in an execution since carries it (`ThreadCarry.upgrade_due`). Always `False` on an
        unversioned worker; on replay it reads what the task recorded.
        """
        if workflow.info().is_target_worker_deployment_version_changed():
            self._thread.upgrade_due = True
        return self._thread.upgrade_due

    def _rest_is_long(self) -> bool:
        info = workflow.info()
        limit = self._spec.continue_after_events or REST_CONTINUE_EVENTS
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= limit

    async def _execute_message(self, message: ThreadMessage) -> None:
        run, thread = self._run, self._thread
        if not thread.running:
            # A new execution: its budgets, ids and scratch data start afresh.
            run.execution += 1
            run.step = 0
            run.call_ids = []
            run.queued = 0
            run.context = {}
            run.events = []
            run.deadline = None
            run.spent = fresh_spending()  # budgets bound each message's execution
            run.output_retries = 0
            run.text_call_sent_back = 0
            run.execution_start = self._transcript.count
            thread.running = True
            content = naming_attachments(message.content, message.attachments)
            said = {"role": "user", "content": content}
            self._transcript.append(said, {"message": said})
            self.publish("message_received", {"message_id": message.id, "content": message.content})
        self._input = self._execution_input(message)
        self._calls = ToolCalls(
            run, self._input, self._approvals, self._background, publish=self.publish
        )
        self._executing = True
        tool_calls, usage = run.tool_calls, dict(run.usage)
        try:
            result = await self._answer_unless_closed()
            outcome: dict[str, Any] = {
                "status": "completed",
                "text": result.text,
                "steps": result.steps,
                **output_item(result),
            }
        except RunError as err:
            outcome = {"status": "failed", "error": err.message, "kind": err.type or "RunError"}
        outcome["tool_calls"] = run.tool_calls - tool_calls
        outcome["agent"] = self._spec.name  # who answered (a handoff may have changed it)
        outcome["usage"] = {k: v - usage.get(k, 0) for k, v in run.usage.items()}
        self._executing = False
        thread.running = False
        thread.queue.pop(0)
        thread.idle_since = workflow.now().isoformat()
        self._finish(message, outcome)
        self.publish(
            "message_completed",
            {"message_id": message.id, **{k: outcome[k] for k in ("status", "text", "error",
                                                                  "agent") if k in outcome}},
        )  # fmt: skip
        self._sync_status()

    async def _answer_unless_closed(self) -> RunResult:
        """`_answer`, cancelled (its calls and approvals with it) when `close` arrives."""
        closed = workflow.wait_condition(lambda: bool(self._thread.closing))
        result = await unless(self._answer(), closed)
        if result is not None:
            return result
        self._approvals.pending.clear()  # their calls will never run
        self._approvals.publish()
        raise RunError(
            f"the thread was closed ({self._thread.closing}) while this message ran",
            kind="ThreadClosed",
        )

    def _finish(self, message: ThreadMessage, outcome: dict[str, Any]) -> None:
        results = self._thread.results
        results[message.id] = {"message_id": message.id, **outcome}
        for stale in list(results)[:-KEPT_RESULTS]:
            del results[stale]

    def _execution_input(self, message: ThreadMessage | None) -> RunInput:
        """What `AgentRun`'s loop and the tool calls read of the current message."""
        thread = self._thread_input
        return RunInput(
            agent=thread.agent,
            prompt=message.content if message else "",
            arguments=thread.arguments,
            attachments=(message.attachments or None) if message else None,
            user_id=thread.user_id,
        )

    def _headline(self) -> str:
        if not hasattr(self, "_thread_input"):
            return ""
        run, thread = self._run, self._thread
        state = f"answering message {run.execution}" if self._executing else "at rest"
        waiting = len(thread.queue) - (1 if self._executing else 0)
        return (
            f"**{self._thread_input.agent}** thread"
            + (f" of {self._thread_input.user_id}" if self._thread_input.user_id else "")
            + f": {state}, step {run.step}; {waiting} message(s) waiting; "
            f"{self._transcript.count} messages, run {run.runs} of its chain"
            + provenance(self._run)
        )

    # -- continue-as-new ---------------------------------------------------------------------

    async def _continue_as_new(self, *, upgrade: bool = False) -> None:
        behind = self._behind_current_version()
        if upgrade and behind:
            # The next run is on the new version; a query of this run would need this one's
            # workers, which may stop once the thread moved: keep the transcript first.
            self._kept = await self._keep_transcript()
        # Moving now, or noting for the next run that it must move at its first rest.
        self._thread.upgrade_due = not upgrade and behind
        self._continuing = True  # callers waiting for this run's answer ask the next run
        await super()._continue_as_new(upgrade=upgrade)

    async def _keep_transcript(self) -> str | None:
        """Keep the whole transcript in the store (`toren.store._transcripts`); its key.

        `None` if that failed: the thread still moves, and its earlier turns are then read by
        querying this run (so this version's workers must answer while the thread lives).
        """
        try:
            key: str = await workflow.execute_activity(
                "toren.keep_transcript",
                {"count": self._transcript.count, "digest": self._transcript.digest},
                result_type=str,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=5),
                summary="keep the transcript before moving to the current version",
            )
        except ActivityError as err:
            workflow.logger.warning("the transcript was not kept before moving: %s", err.cause)
            return None
        return key

    def _prior_reference(self) -> dict[str, Any]:
        reference = super()._prior_reference()
        if self._kept:
            reference["stored"] = self._kept
        return reference

    def _next_input(self, carried: RunState) -> Any:
        thread = dataclasses.replace(self._thread, run=carried)
        return dataclasses.replace(self._thread_input, carry=thread)

    # -- queries -----------------------------------------------------------------------------

    @workflow.query(
        description="A page of the conversation: messages from index `start` (at most `limit`),"
        " with `earlier_run_id` to ask (or `earlier_stored`, the key of the kept transcript in"
        " the store) when `start` is older than this run holds."
    )
    def messages(self, start: int = 0, limit: int = 100) -> dict[str, Any]:
        """`{"total", "start", "messages", "earlier_run_id"[, "earlier_stored"]}`."""
        if not hasattr(self, "_transcript"):
            return {"total": 0, "start": 0, "messages": [], "earlier_run_id": None}
        total = self._transcript.count
        first = total - len(self._run.messages)
        start = max(0, int(start))
        if start < first:
            prior = self._run.prior or {}
            earlier: dict[str, Any] = {"total": total, "start": start, "messages": []}
            earlier["earlier_run_id"] = prior.get("run_id")
            if prior.get("stored"):
                earlier["earlier_stored"] = prior["stored"]
            return earlier
        page = self._run.messages[start - first : start - first + max(1, min(int(limit), 500))]
        if self._run.handoffs:  # who wrote each answer (`toren.workflows._handoff`)
            page = mark_agents(page, start, self._thread_input.agent, self._run.handoffs)
        return {"total": total, "start": start, "messages": page, "earlier_run_id": None}

    @workflow.query(description="Messages waiting to run, in order (the first may be running).")
    def queued_messages(self) -> list[dict[str, Any]]:
        """The queue: id, content and arrival time of each message not yet answered."""
        return [dataclasses.asdict(m) for m in self._thread.queue]
