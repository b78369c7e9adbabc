"""Scenario 1: a worker SIGKILLed at a random moment of a tool call, then a fresh worker.

Each run calls `work` twice in a row (c1, then c2), each handler sleeping 0.2–1.0 s (chosen per
run and passed as the run's arguments). Runs are spread over `concurrency` slots; each slot has
its own agent (task queue) and worker, so one kill hits exactly one run and the harness knows
which phase that run's handler had reached. Kill modes, spread over the runs:

- `random`: SIGKILL a uniform random delay after the run starts, up to the time both handlers
  and the model calls around them take — lands before, during or after a handler;
- `pre`: within 0.3 s of the start, mostly before the first handler starts;
- `during`: a random moment inside the handler of c1 or c2 (after its `start` line);
- `at_return`: a thread watches the record file and SIGKILLs the worker as soon as the handler
  of c1 or c2 wrote its `end` line (0–2 ms later), i.e. after the handler returned and, when the
  kill wins the race, before its completion reached the server;
- `repeat`: SIGKILL during c1's handler on every attempt, so c1 reaches `max_attempts` and must
  fail closed without a further execution.

After each kill a fresh worker starts; Temporal notices the dead one by the heartbeat timeout
(10 s) and retries on the fresh one, which also serves the slot's next run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

from bench.faults.agents import WORK_TOOL, Record, read_records, write_agent
from bench.faults.common import Harness, Outcome, await_outcome, wait_records
from bench.faults.history import RunHistory, fetch_run_history
from bench.faults.report import (
    Figure,
    call_figures,
    info,
    must_equal,
    standard_call_rows,
)
from bench.faults.workers import WorkerProc
from toren import client as toren_client

__all__ = ["run"]

NAME = "1 worker SIGKILL"
MAX_ATTEMPTS = 3
SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "work", "args": {"which": "c1"}}]},
    {"tool_calls": [{"id": "c2", "name": "work", "args": {"which": "c2"}}]},
    "done: {last_tool_result}",
]
# One in ten runs is `repeat` (three kills, ~35 s); the rest share the single-kill modes.
MODES = ["random", "at_return", "pre", "during", "random", "at_return", "during", "pre",
         "random", "repeat"]  # fmt: skip
SHORT_MODES = ["random", "at_return", "pre", "during", "random", "at_return", "during", "pre",
               "repeat", "during"]  # fmt: skip
STALL_AFTER = 60.0
"""Seconds without a result after the last kill before a run counts as stalled."""
PARKED_TIMEOUT = 420.0
"""Seconds a stalled run gets to finish (toren.call_model's start-to-close is 5 min)."""
PHASES = (
    "before handler",
    "during handler",
    "after return, completion not recorded",
    "after return, completion recorded",
)


@dataclass
class Kill:
    """One SIGKILL: which worker process, when, and in which mode."""

    pid: int
    t: float
    mode: str


@dataclass
class Plan:
    """One run: its id, handler durations and kill mode."""

    workflow_id: str
    d1: float
    d2: float
    mode: str
    target: str = "c1"
    kills: list[Kill] = field(default_factory=list)
    outcome: Outcome | None = None
    stalled_on: list[str] | None = None
    """Pending activity types when the run stalled (None: it did not)."""
    parked: asyncio.Task[None] | None = None


def _watch_and_kill(
    path: Path, match: Callable[[Record], bool], pid: int, delay: float, timeout: float
) -> float:
    """Poll `path` from a thread; SIGKILL `pid` `delay` s after a record matches; return when.

    A thread rather than the event loop: the window between a handler's return and its
    completion reaching the server is a few milliseconds, and the loop's latency would miss it.
    """
    deadline = time.monotonic() + timeout
    offset = 0
    buffer = ""
    while time.monotonic() < deadline:
        try:
            with path.open() as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
        except FileNotFoundError:
            chunk = ""
        buffer += chunk
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if line and match(Record(**json.loads(line))):
                if delay:
                    time.sleep(delay)
                when = time.time()
                os.kill(pid, signal.SIGKILL)
                return when
        time.sleep(0.0005)
    return 0.0


async def _drive(h: Harness, record: Path, worker: WorkerProc, plan: Plan) -> WorkerProc | None:
    """Start `plan`'s run, kill the worker per its mode, start a fresh worker, wait the result.

    Returns the worker that serves the slot's next run, or None when this run stalled: then its
    fresh worker stays with it (awaited in the background) and the slot needs a new agent.
    """
    handle = await toren_client.start_run(
        h.client,
        worker.folder.name,
        f"fault run {plan.workflow_id}",
        run_id=plan.workflow_id,
        arguments={"c1": plan.d1, "c2": plan.d2},
    )
    durations = {"c1": plan.d1, "c2": plan.d2}
    if plan.mode in ("random", "pre"):
        span = 0.3 if plan.mode == "pre" else 0.5 + plan.d1 + 0.3 + plan.d2
        await asyncio.sleep(h.rng.uniform(0.0, span))
        pid, when = worker.kill()
        plan.kills.append(Kill(pid, when, plan.mode))
        worker.start()
    elif plan.mode == "during":
        pid = worker.pid
        seen = await wait_records(record, _match(plan.workflow_id, plan.target, "start", pid), 60.0)
        if seen is not None:
            await asyncio.sleep(h.rng.uniform(0.02, 0.9 * durations[plan.target]))
            pid, when = worker.kill()
            plan.kills.append(Kill(pid, when, plan.mode))
            worker.start()
    elif plan.mode == "at_return":
        pid = worker.pid
        ended = _match(plan.workflow_id, plan.target, "end", pid)
        delay = h.rng.uniform(0.0, 0.002)
        when = await asyncio.to_thread(_watch_and_kill, record, ended, pid, delay, 60.0)
        if when:
            assert worker.proc
            worker.proc.wait()
            plan.kills.append(Kill(pid, when, plan.mode))
            worker.start()
    elif plan.mode == "repeat":
        for attempt in range(1, MAX_ATTEMPTS + 1):
            pid = worker.pid
            match = _match(plan.workflow_id, "c1", "start", pid, attempt)
            if await wait_records(record, match, timeout=60.0) is None:
                break
            await asyncio.sleep(h.rng.uniform(0.05, plan.d1 * 0.8))
            pid, when = worker.kill()
            plan.kills.append(Kill(pid, when, plan.mode))
            worker.start()
    await worker.ready()
    # A kill costs the heartbeat timeout (10 s), maybe a workflow task timeout (10 s) and a
    # retry; a minute without a result means the run is stuck on something slower.
    plan.outcome = await await_outcome(handle, timeout=STALL_AFTER)
    if plan.outcome.status != "timeout":
        return worker
    description = await handle.describe()
    plan.stalled_on = sorted(
        a.activity_type.name for a in description.raw_description.pending_activities
    )
    plan.parked = asyncio.create_task(_finish_parked(handle, worker, plan))
    return None


async def _finish_parked(handle: WorkflowHandle[Any, Any], worker: WorkerProc, plan: Plan) -> None:
    """Wait out a stalled run (Temporal retries a dead worker's model call after 5 min)."""
    plan.outcome = await await_outcome(handle, timeout=PARKED_TIMEOUT)
    worker.stop()


def _match(
    workflow_id: str, call_id: str, phase: str, pid: int, attempt: int | None = None
) -> Callable[[Record], bool]:
    def match(r: Record) -> bool:
        return (
            r.run_id == workflow_id
            and r.call_id == call_id
            and r.phase == phase
            and r.pid == pid
            and (attempt is None or r.attempt == attempt)
        )

    return match


def classify(kill: Kill, plan: Plan, records: list[Record], history: RunHistory) -> str:
    """Which phase the run's handler had reached on the killed worker."""
    mine = [r for r in records if r.run_id == plan.workflow_id and r.pid == kill.pid]
    if not mine:
        return PHASES[0]
    last = mine[-1]
    if last.phase == "start":
        return PHASES[1]
    act = history.tool_calls().get(last.call_id)
    if act and act.outcome == "completed" and act.attempt == last.attempt:
        return PHASES[3]
    return PHASES[2]


async def run(h: Harness, runs: int, concurrency: int) -> list[Figure]:
    """Run scenario 1 with `runs` runs over `concurrency` slots; return its figures."""
    began = time.monotonic()
    base = h.workdir / "s1"
    record = base / "records.jsonl"
    modes = SHORT_MODES if h.short else MODES
    plans = [
        Plan(
            workflow_id=f"f1-{i:03d}-{uuid.uuid4().hex[:6]}",
            d1=round(h.rng.uniform(0.2, 1.0), 3),
            d2=round(h.rng.uniform(0.2, 1.0), 3),
            mode=modes[i % len(modes)],
            target=h.rng.choice(["c1", "c2"]),
        )
        for i in range(runs)
    ]
    # The slow `repeat` runs go first so they overlap the rest instead of trailing at the end.
    plans.sort(key=lambda p: p.mode != "repeat")
    slots = min(concurrency, runs)
    queue: asyncio.Queue[Plan] = asyncio.Queue()
    for plan in plans:
        queue.put_nowait(plan)
    ready_seconds: list[float] = []

    async def slot(n: int) -> None:
        agents = 0
        worker: WorkerProc | None = None
        while not queue.empty():
            # Take the run first: setting up a worker awaits, and another slot may empty the queue.
            plan = queue.get_nowait()
            if worker is None:
                # A new agent (task queue) whenever the last one is left to a stalled run.
                agents += 1
                folder = write_agent(base, f"f1_slot{n}_{agents}", tools={"work": WORK_TOOL},
                                     script=SCRIPT, max_attempts=MAX_ATTEMPTS)  # fmt: skip
                worker = h.worker(folder, FAULTS_RECORD=str(record)).start()
                ready_seconds.append(await worker.ready())
            worker = await _drive(h, record, worker, plan)
        if worker is not None:
            worker.stop()

    await asyncio.gather(*(slot(n) for n in range(slots)))
    await asyncio.gather(*(p.parked for p in plans if p.parked is not None))
    histories = [await fetch_run_history(h.client, p.workflow_id) for p in plans]
    records = read_records(record)
    cf = call_figures(records, histories, MAX_ATTEMPTS)
    by_id = {hist.workflow_id: hist for hist in histories}
    phases: Counter[str] = Counter()
    lost_at_return = 0
    for plan in plans:
        for kill in plan.kills:
            phase = classify(kill, plan, records, by_id[plan.workflow_id])
            phases[phase] += 1
            lost_at_return += kill.mode == "at_return" and phase == PHASES[2]
    completed = sum(p.outcome is not None and p.outcome.status == "completed" for p in plans)
    answered = sum(p.outcome is not None and p.outcome.text == "done: c2 ok" for p in plans)
    repeats = [p for p in plans if p.mode == "repeat"]
    at_return = sum(k.mode == "at_return" for p in plans for k in p.kills)
    stalled = [p for p in plans if p.stalled_on is not None]
    mode_counts = Counter(p.mode for p in plans)
    figures = [
        info(NAME, "runs / in flight at once / kills", f"{runs} / {slots} / "
             f"{sum(len(p.kills) for p in plans)}"),  # fmt: skip
        info(NAME, "kill modes", ", ".join(f"{m} {mode_counts[m]}" for m in
                                           ("random", "pre", "during", "at_return", "repeat"))),
        must_equal(NAME, "runs completed", completed, runs),
        must_equal(NAME, "runs answering 'done: c2 ok'", answered, runs),
    ]  # fmt: skip
    if h.short:
        figures.append(
            Figure(
                NAME,
                "kill modes random, pre (can hit a model call)",
                "skipped in --short",
                kind="skip",
            )  # fmt: skip
        )
    for phase in PHASES:
        figures.append(info(NAME, f"kills: {phase}", phases[phase]))
    figures += [
        info(NAME, "at_return kills that beat the completion", f"{lost_at_return}/{at_return}"),
        *standard_call_rows(NAME, cf, histories, MAX_ATTEMPTS),
        must_equal(
            NAME, "calls failed closed (repeat runs, c1 killed 3x)", cf.failed_closed, len(repeats)
        ),  # fmt: skip
        Figure(
            NAME,
            f"runs stalled > {STALL_AFTER:.0f}s after a kill",
            len(stalled),
            "0",
            not stalled,
            "must",
        ),  # fmt: skip
    ]
    for plan in stalled:
        figures.append(info(NAME, f"  stalled {plan.workflow_id}", _stall_text(plan, by_id)))
    figures += [
        info(
            NAME,
            "worker start to ready, s (median)",
            f"{sorted(ready_seconds)[len(ready_seconds) // 2]:.2f}",
        ),  # fmt: skip
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]
    for line in cf.reran_after_recorded:
        figures.append(info(NAME, "  re-run", line))
    return figures


def _stall_text(plan: Plan, by_id: dict[str, RunHistory]) -> str:
    """What a stalled run waited on, and how long after the kill Temporal retried it."""
    kill_t = plan.kills[-1].t if plan.kills else 0.0
    retried = [
        a for a in by_id[plan.workflow_id].activities
        if a.attempt > 1 and a.started_at is not None and a.started_at > kill_t
    ]  # fmt: skip
    waits = ", ".join(
        f"{a.activity_type} attempt {a.attempt} started {a.started_at - kill_t:.0f}s after the kill"
        for a in retried
        if a.started_at is not None
    )
    status = plan.outcome.status if plan.outcome else "?"
    return f"pending {plan.stalled_on}; {waits or 'no retry seen'}; then {status}"
