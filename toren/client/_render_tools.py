"""Tool calls, rendered from history, and what tools did through their context.

ToolCallStarted (for a local tool call, dated when it started, not when its marker was
written), ToolCallCompleted (with attachments by name and id), ToolCallFailed, and the changes
a call's result carries: ToolInvoked, StateSet, ToolEvent, ToolQueued, MessageInjected. A
result the workflow wrote itself (a refused argument, a denial) comes in the next model call's
input and is rendered by `_tool_result`.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from toren.client._render_core import RenderState, failure_text, pick, timestamp_text

__all__ = ["ToolEvents"]


class ToolEvents(RenderState):
    """The `<agent>.<tool>` activities, local or not, and their results."""

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
            self.events[-1]["at"] = timestamp_text(scheduled)
        if isinstance(result, dict):
            self._tool_completed(event, tool, {"call_id": call_id}, result)
        elif marker.HasField("failure"):
            self._tool_failed(event, tool, {"call_id": call_id}, failure_text(marker.failure))

    def _tool_scheduled(self, event: HistoryEvent, tool: str, body: dict[str, Any]) -> None:
        call_id = str(body.get("call_id"))
        gate = self.gates.get(call_id)
        if (
            gate is not None
            and gate.get("auto") == "approve"
            and call_id in self.pending
            and call_id not in self.decided
        ):
            # Scheduled with no decision seen: its rule approved it when the approval expired.
            self.decided.add(call_id)
            self.emit(
                event, "ApprovalResolved", callId=call_id, approved=True, by="toren",
                comment="approval expired; its rule approves", via="expiry",
                rule=gate.get("rule", ""),
            )  # fmt: skip
        fields = pick(body, "args", "idempotencyKey=idempotency_key")
        effects = self.effects.get(tool, "")
        self.emit(
            event, "ToolCallStarted", callId=body.get("call_id"), tool=tool, **fields,
            effects=effects, step=body.get("step"),
        )  # fmt: skip

    def _tool_result(self, event: HistoryEvent, message: dict[str, Any]) -> None:
        """A tool message the workflow wrote itself, found in the next model call's input."""
        self.emit(
            event,
            "ToolCallCompleted",
            callId=message.get("tool_call_id"),
            tool=message.get("name"),
            result=str(message.get("content", "")),
            isError=bool(message.get("is_error")),
        )

    def _tool_completed(
        self, event: HistoryEvent, tool: str, info: dict[str, Any], result: dict[str, Any]
    ) -> None:
        changes = result.get("changes") or {}
        for inv in changes.get("invoked") or []:
            self.emit(
                event,
                "ToolInvoked",
                **pick(inv, "tool"),
                by=tool,
                **pick(inv, "args", "result"),
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
            self.emit(event, "ToolEvent", tool=tool, **pick(emitted, "name=event", "data"))
        for queued in changes.get("queued") or []:
            self.emit(
                event, "ToolQueued", by=tool, tool=queued.get("name"), args=queued.get("args")
            )
        for message in changes.get("messages") or []:
            self.emit(event, "MessageInjected", by=tool, **pick(message, "role", "content"))

    def _tool_failed(
        self, event: HistoryEvent, tool: str, info: dict[str, Any], error: str
    ) -> None:
        self.emit(event, "ToolCallFailed", callId=info.get("call_id"), tool=tool, error=error)
