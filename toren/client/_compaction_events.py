"""`ContextCompacted` in `toren events`: read from the model call that first sent a new plan.

The run records each compaction in its plan, which rides in the next `toren.call_model`'s
input with a `compacted` note (`toren.workflows._context_window`), so the event log shows it
once, right before the call whose prompt it shortened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["emit_compacted"]


def emit_compacted(emit: Callable[..., None], source: Any, call_input: dict[str, Any]) -> None:
    """Emit `ContextCompacted` for a model call's input that carries a compaction note."""
    note = (call_input.get("context") or {}).get("compacted")
    if not isinstance(note, dict):
        return
    emit(
        source,
        "ContextCompacted",
        tokensBefore=note.get("tokens_before"),
        tokensAfter=note.get("tokens_after"),
        messagesFolded=note.get("messages_folded"),
        elided=note.get("elided"),
        summary=note.get("summary") or None,
    )
