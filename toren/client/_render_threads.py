"""A thread's messages, rendered from history.

MessageReceived (by the `send_message` update or signal), MessageAnswered (an execution's
outcome, from the update's result or failure), ThreadCloseRequested, and SignalRefused for a
`send_message` signal the thread refused, with the reason the workflow's own check gives
(`toren.workflows._thread_inbox.message_problem`).
"""

from __future__ import annotations

from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from toren.client._render_core import RenderState, pick
from toren.workflows._thread_inbox import message_problem

__all__ = ["ThreadEvents"]


class ThreadEvents(RenderState):
    """Messages sent to a thread, their answers, and `close`."""

    def _thread_signal(
        self, event: HistoryEvent, name: str, values: list[Any], identity: str
    ) -> None:
        problem = message_problem(values) if name == "send_message" else None
        if problem is not None:
            self.emit(event, "SignalRefused", signal=name, payload=values, reason=problem)
        elif name == "send_message":
            self._message(event, values[0], "", "signal")
        else:
            closing = values[0] if values and isinstance(values[0], dict) else {}
            self.emit(event, "ThreadCloseRequested", by=closing.get("by") or identity)

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
        self._text_call_kept(event)
        self.emit(
            event,
            "MessageAnswered",
            messageId=outcome["message_id"],
            **pick(outcome, "status", "text", "error", "steps", "toolCalls=tool_calls", "usage"),
        )
