"""A run's trajectory (what it did, in order) built from its event log, and scorers over two.

```python
original = trajectory(await toren_client.events(client, "support-a1"), "support-a1")
candidate = trajectory(await toren_client.events(client, eval_id), eval_id)
divergence(original, candidate)          # None, or where they first differ
exact_match(original, candidate)         # 1.0 when the final answers are the same
```

One function builds both sides of an eval (`toren eval`): the model turns with their text, the
tool calls with their arguments and results, approvals, the final answer, tokens and cost. A
scorer is any `score(original, candidate) -> float | dict[str, float]`; `load_scorer` finds
one by `module:function`.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from toren.client._events import Event
from toren.errors import UsageError

__all__ = [
    "Divergence",
    "Scorer",
    "ToolStep",
    "Trajectory",
    "Turn",
    "divergence",
    "exact_match",
    "load_scorer",
    "tool_sequence",
    "trajectory",
]


@dataclass
class ToolStep:
    """One tool call: what the model asked for, and what it got back."""

    tool: str
    args: dict[str, Any]
    call_id: str = ""
    step: int = 0
    """The model turn that asked for it (a queued call: the turn it was queued in)."""
    result: str | None = None
    """The result the model saw; None when the call never finished."""
    is_error: bool = False
    approval: dict[str, Any] | None = None
    """`{"asked": True}` when it was gated; with `approved`, `by`, `comment`, `via` once decided."""
    eval: str | None = None
    """How an eval run answered it: `recorded`, `denied`, `executed`, `diverged`, `would_ask`."""
    provider: str | None = None
    """Set when the model's provider ran it inside the model call."""


@dataclass
class Turn:
    """One model call: its text and the tool calls it asked for."""

    step: int
    text: str = ""
    calls: list[ToolStep] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class Trajectory:
    """What one run did, in order (`trajectory` builds it from the run's events)."""

    run_id: str
    prompt: str = ""
    turns: list[Turn] = field(default_factory=list)
    final: str | None = None
    """The final answer; None when the run did not complete."""
    status: str = "running"
    """`completed`, `failed`, `timed_out`, `canceled`, `terminated` or `running`."""
    error: str | None = None
    error_kind: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    @property
    def calls(self) -> list[ToolStep]:
        """Every tool call, in the order the model asked for them."""
        return [c for t in self.turns for c in t.calls]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)


@dataclass
class Divergence:
    """Where two trajectories first differ."""

    index: int
    """Position in the sequence of tool calls, then the final answer (`len(calls)`)."""
    original: str
    candidate: str

    def __str__(self) -> str:
        return f"#{self.index + 1}: {self.original} → {self.candidate}"


def trajectory(events: Iterable[Event], run_id: str = "") -> Trajectory:
    """Build a run's trajectory from its events (`toren.client.events`, `render`)."""
    path = Trajectory(run_id=run_id)
    by_id: dict[str, ToolStep] = {}

    def find(call_id: Any) -> ToolStep | None:
        call_id = str(call_id or "")
        # An approval names the call id the run gave it (`id-step` for a repeated tool-use id).
        return by_id.get(call_id) or next(
            (c for i, c in by_id.items() if call_id.startswith(f"{i}-")), None
        )

    for event in events:
        kind = event.get("type")
        found = find(event.get("callId")) if "callId" in event else None
        if kind == "RunStarted":
            path.prompt = str(event.get("prompt") or "")
        elif kind == "LlmCallCompleted":
            turn = Turn(
                step=int(event.get("step") or 0),
                text=str(event.get("text") or ""),
                usage=dict(event.get("usage") or {}),
            )
            for asked in event.get("toolCalls") or []:
                call = ToolStep(
                    tool=str(asked.get("name", "")),
                    args=_args(asked.get("arguments", asked.get("args"))),
                    call_id=str(asked.get("id", "")),
                    step=turn.step,
                )
                turn.calls.append(call)
                by_id[call.call_id] = call
            path.turns.append(turn)
        elif kind == "ToolCallStarted":
            if found is None:  # queued by a tool, or run by the provider: no model request
                call = ToolStep(
                    tool=str(event.get("tool", "")),
                    args=_args(event.get("args")),
                    call_id=str(event.get("callId", "")),
                    step=path.turns[-1].step if path.turns else 0,
                    provider=event.get("provider"),
                )
                if path.turns:
                    path.turns[-1].calls.append(call)
                by_id[call.call_id] = call
        elif kind == "ToolCallCompleted":
            if found is not None:
                found.result = str(event.get("result") or "")
                found.is_error = bool(event.get("isError"))
        elif kind == "ToolCallFailed":
            if found is not None and found.result is None:
                found.result, found.is_error = str(event.get("error") or ""), True
        elif kind == "ApprovalRequested":
            if found is not None:
                found.approval = {"asked": True}
        elif kind == "ApprovalResolved":
            if found is not None:
                found.approval = {
                    "asked": True,
                    **{k: event.get(k) for k in ("approved", "by", "comment", "via")},
                }
        elif kind == "EvalAnswered":
            if found is not None:
                found.eval = str(event.get("answer") or "")
        elif kind == "Receipt":
            path.input_tokens = int(event.get("inputTokens") or 0)
            path.output_tokens = int(event.get("outputTokens") or 0)
            path.cost_usd = event.get("costUSD")
        elif kind == "RunCompleted":
            path.status, path.final = "completed", str(event.get("text") or "")
        elif kind == "RunFailed":
            path.status, path.error = "failed", str(event.get("error") or "")
            path.error_kind = str(event.get("kind") or "") or None
        elif kind in ("RunTimedOut", "RunCanceled", "RunTerminated"):
            path.status = {"RunTimedOut": "timed_out", "RunCanceled": "canceled"}.get(
                kind, "terminated"
            )
            path.error = str(event.get("error") or event.get("reason") or "") or None
    return path


def divergence(original: Trajectory, candidate: Trajectory) -> Divergence | None:
    """The first index where the tool calls (name and arguments) or the final answer differ."""
    a, b = _sequence(original), _sequence(candidate)
    nothing = ("", "(nothing)")
    for index in range(max(len(a), len(b))):
        left = a[index] if index < len(a) else nothing
        right = b[index] if index < len(b) else nothing
        if left[0] != right[0]:
            return Divergence(index, left[1], right[1])
    return None


def _sequence(path: Trajectory) -> list[tuple[str, str]]:
    """What `divergence` compares (each call, then the run's end) and how each reads."""
    said = [
        (json.dumps([c.tool, c.args], sort_keys=True), f"{c.tool}({_short(c.args)})")
        for c in path.calls
    ]
    if path.status == "completed":
        said.append((f"answer {path.final}", f"answer {_quote(path.final or '')}"))
    else:
        end = f"{path.status} ({path.error_kind or path.error or ''})".replace(" ()", "")
        said.append((end, end))
    return said


Scorer = Callable[[Trajectory, Trajectory], "float | dict[str, float]"]
"""`score(original, candidate) -> float | dict[str, float]`."""


def exact_match(original: Trajectory, candidate: Trajectory) -> float:
    """1.0 when both runs completed with the same final answer (whitespace aside), else 0.0."""
    if original.final is None or candidate.final is None:
        return 0.0
    return float(original.final.strip() == candidate.final.strip())


def tool_sequence(original: Trajectory, candidate: Trajectory) -> float:
    """How alike the two sequences of tool calls (names and arguments) are, from 0.0 to 1.0.

    1.0 for the same calls in the same order (none at all on both sides included).
    """
    a = [f"{c.tool}({_short(c.args, 10_000)})" for c in original.calls]
    b = [f"{c.tool}({_short(c.args, 10_000)})" for c in candidate.calls]
    if not a and not b:
        return 1.0
    return round(difflib.SequenceMatcher(a=a, b=b, autojunk=False).ratio(), 4)


BUILT_IN: dict[str, Scorer] = {"exact_match": exact_match, "tool_sequence": tool_sequence}
"""Scorers named without a module."""


def load_scorer(spec: str) -> tuple[str, Scorer]:
    """The scorer `spec` names (`module:function`, or a built-in's name), and its name.

    Raises:
        UsageError: no such module or function, or not callable (one line, saying which).
    """
    if spec in BUILT_IN:
        return spec, BUILT_IN[spec]
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise UsageError(
            f"--scorer {spec!r} is not module:function (or one of {', '.join(BUILT_IN)})"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise UsageError(
            f"--scorer {spec!r}: cannot import {module_name!r} ({type(err).__name__}: {err})"
        ) from None
    scorer = getattr(module, name, None)
    if not callable(scorer):
        raise UsageError(
            f"--scorer {spec!r}: module {module_name!r} has no function {name!r}"
            if scorer is None
            else f"--scorer {spec!r}: {name!r} is not a function"
        )
    return name, scorer


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            raw = json.loads(raw) if raw else {}
    return raw if isinstance(raw, dict) else {"_": raw} if raw is not None else {}


def _short(args: dict[str, Any], limit: int = 120) -> str:
    text = json.dumps(args, ensure_ascii=False, sort_keys=True)[1:-1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _quote(text: str, limit: int = 80) -> str:
    line = " ".join(text.split())
    return json.dumps(line if len(line) <= limit else line[: limit - 1] + "…", ensure_ascii=False)
