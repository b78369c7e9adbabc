"""The `AgentThread` workflow: a conversation that lives on and runs an execution per message.

```text
start {"agent": "support", "user_id": "alice"}      (workflow id = the thread id)
update send_message {"content": "..."} -> {"message_id", "status": "completed", "text", ...}
signal send_message {"content": "..."}              (queued; nothing waits for it)
signal close {"by": "alice"}                         (ends it once the running execution ends)
query  messages(start, limit) / execution() / pending_approvals() / ...
```

An execution is `AgentRun`'s own loop (the same tools, approvals, budgets and handlers: this
class inherits them) over the thread's transcript, which grows by one user message per
execution. Messages run one at a time, in order of arrival. At rest the thread is a workflow
waiting on a condition: no activity, no timer but the idle timeout. It continues as new at rest
once its history is long (or mid-execution like an `AgentRun`), with the conversation by
reference, so each run's history stays flat however long the conversation gets.

A caller of `send_message` gets the execution's outcome. When the thread continues as new in
the middle of that execution, the update answers `{"status": "running", "continued": true}`
instead, and the caller asks the new run with the update `wait_result(message_id)` (toren's
client does this for you).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
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
    from toren.workflows._context_window import compact_instructions
    from toren.workflows._input import json_type, one_raw_input, parse_thread_input
    from toren.workflows._tool_calls import ToolCalls

__all__ = ["THREAD_SIGNALS", "AgentThread", "message_problem"]

REST_CONTINUE_EVENTS = 1_000
"""At rest, continue as new past this many history events (or `continueAsNewAfterEvents`)."""
KEPT_RESULTS = 20
"""Outcomes of the latest executions kept for late callers of `wait_result`."""
MESSAGE_KEYS = ("content", "attachments", "id")
THREAD_SIGNALS = ("send_message", "close")
"""Signals a thread takes besides approve and deny."""


def message_problem(request: Sequence[Any]) -> str | None:
    """Why a `send_message` argument is wrong, or `None`."""
    if len(request) != 1:
        return f"send_message takes one argument, got {len(request)}"
    message = request[0]
    if not isinstance(message, dict):
        return f"send_message takes a JSON object, got {json_type(message)}"
    unknown = [k for k in message if k not in MESSAGE_KEYS]
    if unknown:
        return f"unknown key(s) {', '.join(map(repr, unknown))} (keys: {', '.join(MESSAGE_KEYS)})"
    content = message.get("content")
    if content is None:
        return "missing key 'content' (the message's text)"
    if not isinstance(content, str):
        return f"'content' must be a string, got {json_type(content)}"
    if not content.strip():
        return "'content' is empty"
    attachments = message.get("attachments")
    if attachments is not None and (
        not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments)
    ):
        return "'attachments' must be a list of attachment ids (strings)"
    if message.get("id") is not None and not isinstance(message["id"], str):
        return "'id' must be a string"
    return None


def _bad_message(problem: str) -> ApplicationError:
    return ApplicationError(
        f"invalid send_message: {problem}; send a JSON object like "
        '{"content": "Where is order A-1002?"}',
        type="InvalidMessage",
        non_retryable=True,
    )


@workflow.defn(name="AgentThread", failure_exception_types=[InvalidJSONPayloadError])
class AgentThread(AgentRun):
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
        self._run.spec = await self._load_spec(input.agent)
        self._background = Background(self._run, self._budget.add_child)
        self._input = self._execution_input(None)
        self._calls = ToolCalls(
            self._run, self._input, self._approvals, self._background, publish=self.publish
        )
        self._approvals.publish()
        self._sync_status()
        thread = self._thread
        while True:
            if thread.queue and (thread.running or not thread.closing):
                await self._execute_message(thread.queue[0])
                continue
            if thread.closing:
                break
            if self._rest_is_long():
                await self._continue_as_new()
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
            await workflow.wait_condition(
                lambda: bool(self._thread.queue) or bool(self._thread.closing),
                timeout=timeout,
                timeout_summary="thread idle timeout",
            )
        except TimeoutError:
            return False
        return True

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
            run.execution_start = self._transcript.count
            thread.running = True
            said = {"role": "user", "content": message.content}
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
            }
        except RunError as err:
            outcome = {"status": "failed", "error": err.message, "kind": err.type or "RunError"}
        outcome["tool_calls"] = run.tool_calls - tool_calls
        outcome["usage"] = {k: v - usage.get(k, 0) for k, v in run.usage.items()}
        self._executing = False
        thread.running = False
        thread.queue.pop(0)
        thread.idle_since = workflow.now().isoformat()
        self._finish(message, outcome)
        self.publish(
            "message_completed",
            {"message_id": message.id, **{k: outcome[k] for k in ("status", "text", "error")
                                          if k in outcome}},
        )  # fmt: skip
        self._sync_status()

    async def _answer_unless_closed(self) -> RunResult:
        """`_answer`, cancelled (its calls and approvals with it) when `close` arrives."""
        answering = asyncio.ensure_future(self._answer())
        closed = asyncio.ensure_future(workflow.wait_condition(lambda: bool(self._thread.closing)))
        await workflow.wait([answering, closed], return_when=asyncio.FIRST_COMPLETED)
        if answering.done():
            closed.cancel()
            return answering.result()
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError, CancelledError, ActivityError):
            await answering
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
        )

    # -- continue-as-new ---------------------------------------------------------------------

    async def _continue_as_new(self) -> None:
        self._continuing = True  # callers waiting for this run's answer ask the next run
        await super()._continue_as_new()

    def _next_input(self, carried: RunState) -> Any:
        thread = dataclasses.replace(self._thread, run=carried)
        return dataclasses.replace(self._thread_input, carry=thread)

    # -- messages ----------------------------------------------------------------------------

    def _enqueue(self, message: dict[str, Any], message_id: str) -> None:
        if self._knows(message_id):
            return  # a retried request: it runs once
        self._thread.queue.append(
            ThreadMessage(
                id=message_id,
                content=message["content"],
                attachments=list(message.get("attachments") or []),
                received_at=workflow.now().isoformat(),
            )
        )

    async def _outcome(self, message_id: str) -> dict[str, Any]:
        # Before `run` has taken over a carried thread, this run does not know the message.
        await workflow.wait_condition(lambda: hasattr(self, "_thread_input"))
        if not self._knows(message_id):
            raise ApplicationError(
                f"no message {message_id!r} is waiting or recently answered in this thread",
                type="UnknownMessage",
                non_retryable=True,
            )
        await workflow.wait_condition(
            lambda: message_id in self._thread.results or self._continuing
        )
        outcome = self._thread.results.get(message_id)
        if outcome is None:
            return {"message_id": message_id, "status": "running", "continued": True}
        if outcome["status"] == "failed":
            raise ApplicationError(
                str(outcome.get("error")),
                outcome,
                type=str(outcome.get("kind") or "RunError"),
                non_retryable=True,
            )
        return outcome

    @workflow.update(
        name="send_message",
        description='Send a message and wait for the answer: {"content": "...", "attachments": '
        "[ids]}. Messages run one at a time, in order.",
    )
    async def send_message_update(self, *request: Any) -> dict[str, Any]:
        """Queue the message and return its execution's outcome."""
        info = workflow.current_update_info()
        message_id = str(request[0].get("id") or (info.id if info else "")) or self._new_id()
        self._enqueue(request[0], message_id)
        return await self._outcome(message_id)

    @send_message_update.validator
    def _validate_send_message(self, *request: Any) -> None:
        problem = message_problem(request)
        if problem is not None:
            raise _bad_message(problem)
        if self._thread.closing:
            raise ApplicationError(
                f"the thread is closed ({self._thread.closing}); start a new one",
                type="ThreadClosed",
                non_retryable=True,
            )

    @workflow.signal(
        name="send_message",
        description='Queue a message without waiting: {"content": "...", "attachments": [ids]}.',
    )
    def send_message_signal(self, *request: Any) -> None:
        """Queue the message; a malformed one, or one sent to a closed thread, is refused."""
        problem = message_problem(request)
        if problem is None and self._thread.closing:
            problem = f"the thread is closed ({self._thread.closing})"
        if problem is not None:
            workflow.logger.warning("send_message signal refused: %s", problem)
            self._run.refused.append(
                {
                    "signal": "send_message",
                    "payload": list(request),
                    "reason": problem,
                    "at": workflow.now().isoformat(),
                }
            )
            return
        self._enqueue(request[0], str(request[0].get("id") or self._new_id()))

    @workflow.update(
        description="Wait for the outcome of message `message_id` (after send_message answered "
        '{"continued": true}).'
    )
    async def wait_result(self, message_id: str) -> dict[str, Any]:
        """The message's outcome once its execution ends."""
        return await self._outcome(message_id)

    @wait_result.validator
    def _validate_wait_result(self, message_id: str) -> None:
        if not isinstance(message_id, str):
            raise _bad_message("wait_result takes a message id (a string)")

    def _knows(self, message_id: str) -> bool:
        return message_id in self._thread.results or any(
            m.id == message_id for m in self._thread.queue
        )

    @workflow.signal(
        description='Close the thread: {"by": ...}. A running execution is cancelled (its calls '
        "and waiting approvals with it); waiting messages fail with ThreadClosed."
    )
    def close(self, *request: Any) -> None:
        """End the thread; the running and waiting messages are answered with `ThreadClosed`."""
        by = ""
        if request and isinstance(request[0], dict):
            by = str(request[0].get("by") or "")
        if not self._thread.closing:
            self._thread.closing = f"close by {by}" if by else "close"

    def _new_id(self) -> str:
        return f"msg-{workflow.uuid4().hex[:12]}"

    # issue 39: compaction by hand, at rest
    @workflow.update(description='Compact the conversation now (at rest): {"instructions": "..."}.')
    async def compact(self, *request: Any) -> dict[str, Any]:
        """Fold all but the last messages into a summary the model writes."""
        busy = self._executing or bool(self._thread.queue)
        return await self._window.compact_now(compact_instructions(request, busy))

    @compact.validator
    def _validate_compact(self, *request: Any) -> None:
        compact_instructions(request, self._executing or bool(self._thread.queue))

    # -- queries -----------------------------------------------------------------------------

    @workflow.query(
        description="A page of the conversation: messages from index `start` (at most `limit`),"
        " with `earlier_run_id` to ask when `start` is older than this run holds."
    )
    def messages(self, start: int = 0, limit: int = 100) -> dict[str, Any]:
        """`{"total", "start", "messages", "earlier_run_id"}`."""
        if not hasattr(self, "_transcript"):
            return {"total": 0, "start": 0, "messages": [], "earlier_run_id": None}
        total = self._transcript.count
        first = total - len(self._run.messages)
        start = max(0, int(start))
        if start < first:
            earlier = (self._run.prior or {}).get("run_id")
            return {"total": total, "start": start, "messages": [], "earlier_run_id": earlier}
        page = self._run.messages[start - first : start - first + max(1, min(int(limit), 500))]
        return {"total": total, "start": start, "messages": page, "earlier_run_id": None}

    @workflow.query(description="Messages waiting to run, in order (the first may be running).")
    def queued_messages(self) -> list[dict[str, Any]]:
        """The queue: id, content and arrival time of each message not yet answered."""
        return [dataclasses.asdict(m) for m in self._thread.queue]
