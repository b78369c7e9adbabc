"""Figures, the checks shared by scenarios, and the printed table.

A figure is a number with an expectation. `must` figures decide the exit status (the harness
fails when one is off); `finding` figures flag a toren problem the harness measured but that
is not a durability invariant; the rest are information.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.faults.agents import Record
from bench.faults.history import RunHistory

__all__ = [
    "CallFigures",
    "Figure",
    "call_figures",
    "info",
    "must_equal",
    "must_zero",
    "render_table",
    "standard_call_rows",
]


@dataclass
class Figure:
    """One row of the table."""

    scenario: str
    name: str
    value: Any
    expect: str = ""
    """What the value must be, for people (`0`, `= 100`, `<= 3`); empty for information."""
    ok: bool | None = None
    """True/False for a checked figure, None for information."""
    kind: str = "info"
    """`must` (decides the exit status), `finding` (a toren problem, reported), or `info`."""

    @property
    def verdict(self) -> str:
        """What the last column says."""
        if self.kind == "skip":
            return "skipped"
        if self.ok is None:
            return ""
        if self.ok:
            return "ok"
        return "FAIL" if self.kind == "must" else "FINDING"


def must_zero(scenario: str, name: str, value: int) -> Figure:
    """A figure that must be 0."""
    return Figure(scenario, name, value, "0", value == 0, "must")


def must_equal(scenario: str, name: str, value: int, expected: int) -> Figure:
    """A figure that must equal `expected` (shown as `value/expected`)."""
    return Figure(scenario, name, f"{value}/{expected}", f"= {expected}", value == expected, "must")


def info(scenario: str, name: str, value: Any) -> Figure:
    """A figure for information only."""
    return Figure(scenario, name, value)


@dataclass
class CallFigures:
    """Per-call facts from record files checked against histories."""

    calls: int
    executions: dict[tuple[str, str], int]
    more_than_once: int
    over_max_attempts: int
    keys_differing: int
    keys_not_from_history: int
    reran_after_recorded: list[str]
    never_ran: int
    failed_closed: int

    @property
    def max_executions(self) -> int:
        """The most executions of one call."""
        return max(self.executions.values(), default=0)


def call_figures(
    records: Sequence[Record], histories: Iterable[RunHistory], max_attempts: int
) -> CallFigures:
    """Check every tool call of `histories` against the handler executions in `records`."""
    by_call: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        by_call[r.call].append(r)
    executions: dict[tuple[str, str], int] = {}
    keys_differing = keys_not_from_history = over_max = never_ran = failed_closed = 0
    reran: list[str] = []
    for run in histories:
        for call_id, act in run.tool_calls().items():
            lines = by_call.get((run.workflow_id, call_id), [])
            starts = [r for r in lines if r.phase == "start"]
            executions[(run.workflow_id, call_id)] = len(starts)
            never_ran += not starts
            if len(starts) > max_attempts or any(r.attempt > max_attempts for r in lines):
                over_max += 1
            keys = {r.idempotency_key for r in lines}
            keys_differing += len(keys) > 1
            # The key the workflow put in the activity input: every attempt must have used it.
            keys_not_from_history += bool(keys - {act.input.get("idempotency_key")})
            if act.outcome in ("failed", "timed_out") and act.attempt >= max_attempts:
                failed_closed += 1
            if act.outcome == "completed" and act.closed_at is not None:
                # Ran again after Temporal recorded the completion: a later attempt number, or
                # any start after the completion event (same machine, same clock).
                again = [r for r in starts if r.attempt > act.attempt or r.t > act.closed_at]
                if again:
                    reran.append(
                        f"{run.workflow_id}/{call_id}: completed at attempt {act.attempt}, "
                        f"ran again as attempt(s) {[r.attempt for r in again]}"
                    )
    return CallFigures(
        calls=len(executions),
        executions=executions,
        more_than_once=sum(n > 1 for n in executions.values()),
        over_max_attempts=over_max,
        keys_differing=keys_differing,
        keys_not_from_history=keys_not_from_history,
        reran_after_recorded=reran,
        never_ran=never_ran,
        failed_closed=failed_closed,
    )


def standard_call_rows(
    scenario: str, cf: CallFigures, histories: Sequence[RunHistory], max_attempts: int
) -> list[Figure]:
    """The rows every tool scenario reports: executions, keys, re-runs, task failures."""
    return [
        info(scenario, "tool calls (scheduled in histories)", cf.calls),
        info(scenario, "executions per call: max", cf.max_executions),
        info(scenario, "calls that ran more than once", cf.more_than_once),
        must_zero(
            scenario, f"calls that ran more than max_attempts={max_attempts}", cf.over_max_attempts
        ),
        must_zero(
            scenario, "idempotency keys that differed between attempts of a call", cf.keys_differing
        ),
        must_zero(
            scenario, "attempts whose key differs from the workflow's", cf.keys_not_from_history
        ),
        must_zero(
            scenario, "recorded-completed calls that ran again", len(cf.reran_after_recorded)
        ),
        must_zero(
            scenario,
            "workflow task failures (all histories)",
            sum(h.workflow_task_failures for h in histories),
        ),
        info(
            scenario,
            "workflow task timeouts (held by a dead worker, or its sticky queue)",
            sum(h.workflow_task_timeouts for h in histories),
        ),
    ]


def render_table(figures: Sequence[Figure]) -> str:
    """The figures as a fixed-width table."""
    header = ("scenario", "figure", "value", "expect", "verdict")
    rows = [header] + [(f.scenario, f.name, str(f.value), f.expect, f.verdict) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    previous = None
    for n, row in enumerate(rows):
        if n == 1 or (n > 1 and row[0] != previous):
            lines.append("  ".join("-" * w for w in widths))
        # Print the scenario name once per block, so the figures read as a list under it.
        shown = row if n == 0 or row[0] != previous else ("", *row[1:])
        previous = row[0]
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(shown, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)
