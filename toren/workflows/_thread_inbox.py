"""How messages reach a thread: `send_message` (update or signal), `wait_result`, `close`.

`compact` folds the conversation the model sees, at rest (`toren.workflows._context_window`).

Each message is checked here (`message_problem`, which the event log uses too, to say why a
signal was refused), queued once however often its request is retried (update ids and message
ids deduplicate), and answered with its execution's outcome. `AgentThread` inherits these
handlers from `ThreadInbox`; their names are part of the contract, never rename one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from toren.agent._types import RunState, ThreadCarry, ThreadMessage
    from toren.workflows._context_window import ContextWindow, compact_instructions
    from toren.workflows._input import json_type

__all__ = ["THREAD_SIGNALS", "ThreadInbox", "message_problem"]

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


class ThreadInbox:
    """The message handlers of `AgentThread`, over the thread's carried state."""

    _run: RunState
    _thread: ThreadCarry
    _continuing: bool
    _executing: bool
    _window: ContextWindow

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

    @workflow.signal(
        description="Move to the Worker Deployment's current version now, if at rest and on an "
        "older one (`toren deploy move-threads`); mid-execution, once the execution ends."
    )
    def upgrade(self, *request: Any) -> None:
        """Wake the thread: its rest ends when it is behind the current version (`_rest`)."""

    def _new_id(self) -> str:
        return f"msg-{workflow.uuid4().hex[:12]}"

    @workflow.update(description='Compact the conversation now (at rest): {"instructions": "..."}.')
    async def compact(self, *request: Any) -> dict[str, Any]:
        """Fold all but the last messages into a summary the model writes."""
        busy = self._executing or bool(self._thread.queue)
        return await self._window.compact_now(compact_instructions(request, busy))

    @compact.validator
    def _validate_compact(self, *request: Any) -> None:
        compact_instructions(request, self._executing or bool(self._thread.queue))
