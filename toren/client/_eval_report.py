"""An eval's report: a table for the terminal, Markdown and JSON for files (`toren eval --out`).

```python
cases = await run_evals(client, sources, task_queue="support.eval")
print(table(cases))
Path("report.md").write_text(markdown(cases, agent="support"))
```

Per recorded run: its eval run, where the two diverged, how the eval's calls were answered
(from the record, diverged, would ask a person), tokens and cost on both sides, and the
scores; the Markdown adds both trajectories side by side.
"""

from __future__ import annotations

import json
import math
from typing import Any

from toren.client._eval import EvalCase
from toren.client._trajectory import ToolStep, Trajectory

__all__ = ["as_json", "markdown", "table"]


def table(cases: list[EvalCase]) -> str:
    """One line per recorded run, aligned for a terminal."""
    names = _score_names(cases)
    head = ["run", "eval run", "status", "calls", "diverged at", "rec/div/ask", "tokens", *names]
    rows = [head]
    for case in cases:
        o, c = case.original, case.candidate
        rows.append(
            [
                case.source,
                case.eval_run,
                f"{o.status}→{c.status}",
                f"{len(o.calls)}→{len(c.calls)}",
                _where(case) or "same",
                f"{case.answers('recorded')}/{case.answers('diverged')}/{case.answers('would_ask')}",
                f"{_tokens(o)}→{_tokens(c)}",
                *(_score(case.scores.get(n)) for n in names),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    means = [_mean(cases, n) for n in names]
    same = sum(1 for case in cases if case.divergence is None)
    lines.append(
        f"{len(cases)} runs, {same} unchanged"
        + "".join(f", mean {n} {m}" for n, m in zip(names, means, strict=True))
    )
    return "\n".join(line.rstrip() for line in lines)


def markdown(cases: list[EvalCase], agent: str = "", model: str | None = None) -> str:
    """The report as Markdown: the table, then each run's two trajectories side by side."""
    names = _score_names(cases)
    title = f"# Eval of {agent}" if agent else "# Eval"
    out = [title, ""]
    if model:
        out += [f"Model: `{model}`", ""]
    out += [
        "| run | eval run | status | calls | diverged at | from record / diverged / would ask "
        "| tokens | cost | " + " | ".join(names) + " |",
        "|" + "---|" * (8 + len(names)),
    ]
    for case in cases:
        o, c = case.original, case.candidate
        out.append(
            f"| `{case.source}` | `{case.eval_run}` | {o.status} → {c.status} "
            f"| {len(o.calls)} → {len(c.calls)} "
            f"| {_cell(str(case.divergence)) if case.divergence else 'same'} "
            f"| {case.answers('recorded')} / {case.answers('diverged')} / "
            f"{case.answers('would_ask')} | {_tokens(o)} → {_tokens(c)} "
            f"| {_cost(o)} → {_cost(c)} | "
            + " | ".join(_score(case.scores.get(n)) for n in names)
            + " |"
        )
    for case in cases:
        out += ["", f"## `{case.source}` → `{case.eval_run}`", ""]
        if case.divergence:
            out += [f"Diverged at {_cell(str(case.divergence))}.", ""]
        out += ["| # | original | eval |", "|---|---|---|"]
        left, right = _lines(case.original), _lines(case.candidate)
        first = case.divergence.index if case.divergence else None
        for i in range(max(len(left), len(right))):
            mark = " ⚠" if i == first else ""
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            out.append(f"| {i + 1}{mark} | {_cell(a)} | {_cell(b)} |")
    return "\n".join(out) + "\n"


def as_json(cases: list[EvalCase], agent: str = "", model: str | None = None) -> str:
    """The report as JSON: every case whole (both trajectories), NaN scores as null."""
    body: dict[str, Any] = {"agent": agent, "model": model, "runs": [c.to_dict() for c in cases]}
    return json.dumps(_no_nan(body), indent=2, ensure_ascii=False)


def _where(case: EvalCase, width: int = 40) -> str:
    """Where a case diverged, in a table cell: the argument (or call) that differs."""
    found = case.divergence
    if found is None:
        return ""
    a, b = found.original, found.candidate
    at = 0
    while at < min(len(a), len(b)) and a[at] == b[at]:
        at += 1
    # From the argument the difference is in (or the whole call) to that argument's end.
    start = max(a.rfind("(", 0, at) + 1, a.rfind(", ", 0, at) + 2)
    if "(" not in a[:at] or start <= a.find("(") + 1:
        start = 0
    return f"#{found.index + 1}: {_part(a, start, at, width)} → {_part(b, start, at, width)}"


def _part(text: str, start: int, at: int, width: int) -> str:
    """`text` from `start` to the end of the argument holding position `at`, with marks."""
    end = text.find(", ", at) if "(" in text[:at] else -1
    end = len(text) if end < 0 else end
    piece = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    return _short(piece, width)


def _lines(path: Trajectory) -> list[str]:
    """A trajectory as the rows of its side: each call with its answer, then the end.

    The model's text before a turn's calls leads that turn's first call.
    """
    rows = []
    for turn in path.turns:
        for i, call in enumerate(turn.calls):
            said = f"_{_short(turn.text, 80)}_ " if i == 0 and turn.text.strip() else ""
            rows.append(said + _call(call))
    if path.status == "completed":
        rows.append(f"**answer** {_short(path.final or '', 200)}")
    else:
        rows.append(f"**{path.status}** {_short(path.error or '', 200)}")
    return rows


def _call(call: ToolStep) -> str:
    args = json.dumps(call.args, ensure_ascii=False, sort_keys=True)
    said = f"`{call.tool}({_short(args[1:-1], 80)})`"
    if call.approval:
        if "approved" in call.approval:
            verdict = "approved" if call.approval["approved"] else "denied"
            said += f" [{verdict} by {call.approval.get('by')}]"
        else:
            said += " [asked a person]"
    if call.eval:
        said += f" ({call.eval})"
    if call.result is not None:
        said += f" → {'error: ' if call.is_error else ''}{_short(call.result, 120)}"
    return said


def _score_names(cases: list[EvalCase]) -> list[str]:
    return list(dict.fromkeys(n for case in cases for n in case.scores))


def _score(value: float | None) -> str:
    if value is None:
        return ""
    return "error" if math.isnan(value) else f"{value:.2f}"


def _mean(cases: list[EvalCase], name: str) -> str:
    found = [case.scores.get(name, math.nan) for case in cases]
    values = [v for v in found if not math.isnan(v)]
    return f"{sum(values) / len(values):.2f}" if values else "n/a"


def _tokens(path: Trajectory) -> str:
    return str(path.input_tokens + path.output_tokens)


def _cost(path: Trajectory) -> str:
    return f"${path.cost_usd:.4f}" if path.cost_usd is not None else "n/a"


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _no_nan(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value
