"""What every part of the event log's renderer shares: its state, decoding and field helpers.

`_events._Renderer` reads a history one event at a time; its families (`_render_run`,
`_render_tools`, `_render_approvals`, `_render_threads`) all extend `RenderState`, which holds
what one event leaves for a later one (scheduled activities, pending approvals, the run's
prices) and appends to the log. Decoding never raises: a payload it cannot read is shown as
`<undecodable payload>`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import PayloadConverter
from temporalio.converter import default as default_converter

__all__ = ["Event", "RenderState", "failure_text", "pick", "timestamp_text", "tool_of"]

Event = dict[str, Any]

_CONVERTER = default_converter().payload_converter


def pick(source: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Fields of an event taken from `source`, in order: `"key"`, or `"eventKey=source_key"`."""
    fields = {}
    for key in keys:
        name, _, source_key = key.partition("=")
        fields[name] = source.get(source_key or name)
    return fields


def timestamp_text(value: Any) -> str:
    """A marker's protobuf timestamp (`{"seconds": .., "nanos": ..}` or RFC 3339) as `at` text."""
    if isinstance(value, str):
        return value if value.endswith("Z") else value + "Z"
    at = datetime.fromtimestamp(
        int(value.get("seconds", 0)) + int(value.get("nanos", 0)) / 1e9, UTC
    ).replace(tzinfo=None)
    return at.isoformat() + "Z"


def failure_text(failure: Any) -> str:
    """A Temporal failure's message, followed by each cause's."""
    text: str = failure.message
    cause = failure.cause if failure.HasField("cause") else None
    while cause is not None and cause.message:
        text += f": {cause.message}"
        cause = cause.cause if cause.HasField("cause") else None
    return text


def tool_of(activity_type: str) -> str | None:
    """The tool an activity type `<agent>.<tool>` (or `local.<tool>`) runs; `None` for toren's."""
    if "." in activity_type and not activity_type.startswith("toren."):
        return activity_type.split(".", 1)[1]
    return None


class RenderState:
    """What the renderer knows so far of the history it reads, and the log it wrote."""

    def __init__(self, converter: PayloadConverter | None = None) -> None:
        self.converter = converter or _CONVERTER
        self.events: list[Event] = []
        self.scheduled: dict[int, dict[str, Any]] = {}
        self.effects: dict[str, str] = {}
        self.pending: set[str] = set()
        self.model_calls: dict[str, dict[str, Any]] = {}
        self.decided: set[str] = set()
        self.schemas: dict[str, dict[str, Any]] = {}
        """Each tool's input schema, from the run's recorded spec (edited arguments fit it)."""
        self.edited_by: dict[str, str] = {}
        """Calls approved with edited arguments, by whom: their next check is of the edit."""
        self.gates: dict[str, dict[str, Any]] = {}
        """Each gated call's recorded check: its tool, rule and approvers."""
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
        self.inherited = 0
        """Tool results a fork's first model call brings from its source (`RunInput.fork`):
        they ran in the source, not here, so they are no ToolCallCompleted of this run."""
        self.agent: str | None = None
        """The agent whose spec the run loaded last (a handoff loads another)."""
        self.typed = False
        """Whether that spec has a typed `output:` (its final answer matches it)."""
        self.text_call: dict[str, Any] | None = None
        """The last reply's tool call written as text (`toren.workflows._text_calls`), until
        the run sends it back (a `ToolCallAsText` from the correction) or ends with it."""

    def _decode(self, payloads: Payloads | None) -> list[Any]:
        if payloads is None or not payloads.payloads:
            return []
        try:
            return list(self.converter.from_payloads(list(payloads.payloads)))
        except Exception:
            return ["<undecodable payload>"]

    def _first(self, payloads: Payloads | None) -> Any:
        values = self._decode(payloads)
        return values[0] if values else None

    def _text_call_kept(self, source: HistoryEvent) -> None:
        """`ToolCallAsText` with `sentBack` false: the run or message ended with one."""
        if self.text_call is not None:
            self.emit(source, "ToolCallAsText", **self.text_call, sentBack=False)
            self.text_call = None

    def emit(self, source: HistoryEvent, type_: str, **fields: Any) -> None:
        """Append an event of `type_`, dated when `source` was written."""
        self.events.append(
            {"type": type_, "at": source.event_time.ToDatetime().isoformat() + "Z", **fields}
        )
