"""Scenario 5: SIGTERM to a worker while tool calls are in flight (a clean shutdown).

Each run makes one turn of two concurrent `work` calls of 3 s. Once handlers run, the worker
gets SIGTERM and, as in a rolling deploy, a fresh worker starts at once. toren gives in-flight
calls 30 s (`toren.worker.GRACEFUL_SHUTDOWN`) to finish: each must finish on the old worker,
reach Temporal, and never run again on the new one.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.faults.agents import WORK_TOOL, read_records, write_agent
from bench.faults.common import Harness, await_outcome, wait_records
from bench.faults.history import fetch_run_history
from bench.faults.report import (
    Figure,
    call_figures,
    info,
    must_equal,
    must_zero,
    standard_call_rows,
)
from toren import client as toren_client

__all__ = ["run"]

NAME = "5 worker SIGTERM"
MAX_ATTEMPTS = 3
HANDLER_SECONDS = 3.0
SCRIPT = [
    {
        "tool_calls": [
            {"id": "c1", "name": "work", "args": {"which": "c1"}},
            {"id": "c2", "name": "work", "args": {"which": "c2"}},
        ]
    },
    "done: {last_tool_result}",
]


async def run(h: Harness, runs: int) -> list[Figure]:
    """Run scenario 5 with `runs` runs (two calls each); return its figures."""
    began = time.monotonic()
    base = h.workdir / "s5"
    record = base / "records.jsonl"
    folder = write_agent(
        base, "f5_shutdown", tools={"work": WORK_TOOL}, script=SCRIPT, max_attempts=MAX_ATTEMPTS
    )
    old = h.worker(folder, FAULTS_RECORD=str(record)).start()
    await old.ready()
    old_pid = old.pid
    assert old.proc
    old_proc = old.proc
    handles = [
        await toren_client.start_run(
            h.client,
            folder.name,
            "two slow calls",
            run_id=f"f5-{i:03d}-{uuid.uuid4().hex[:6]}",
            arguments={"c1": HANDLER_SECONDS, "c2": HANDLER_SECONDS},
        )
        for i in range(runs)
    ]
    # SIGTERM 1 s into the first handler: by then the worker has taken every run's calls, a
    # pool's worth are in their handlers and the rest wait for a thread (see the wait row), so
    # the old worker must drain a backlog of several 3 s waves within the 30 s grace.
    await wait_records(record, lambda r: r.phase == "start", 60.0)
    await asyncio.sleep(1.0)
    term_at = old.terminate()
    fresh = h.worker(folder, FAULTS_RECORD=str(record)).start()
    exit_code = await asyncio.to_thread(old_proc.wait, 60)
    exited_after = time.time() - term_at
    await fresh.ready()
    outcomes = await asyncio.gather(*(await_outcome(hd, timeout=120.0) for hd in handles))
    fresh.stop()
    histories = [await fetch_run_history(h.client, hd.id) for hd in handles]
    records = read_records(record)
    cf = call_figures(records, histories, MAX_ATTEMPTS)
    old_lines = [r for r in records if r.pid == old_pid]
    started_old = {r.call for r in old_lines if r.phase == "start"}
    ended_old = {r.call for r in old_lines if r.phase == "end"}
    in_flight = {r.call for r in old_lines if r.phase == "start" and r.t < term_at} - {
        r.call for r in old_lines if r.phase == "end" and r.t < term_at
    }
    started_after_term = {r.call for r in old_lines if r.phase == "start" and r.t >= term_at}
    completed_first_attempt = sum(
        a.outcome == "completed" and a.attempt == 1
        for hist in histories
        for a in hist.tool_calls().values()
    )
    # How long a call the worker had taken waited for its handler to start: toren runs sync
    # handlers with asyncio.to_thread, whose default pool has min(32, cores + 4) threads.
    waits = []
    for hist in histories:
        for call_id, act in hist.tool_calls().items():
            first = next((r for r in records if r.call == (hist.workflow_id, call_id)), None)
            if first is not None and act.started_at is not None and act.attempt == 1:
                waits.append(first.t - act.started_at)
    calls = 2 * runs
    finished_after = len(ended_old & (in_flight | started_after_term))
    completed = sum(o.status == "completed" for o in outcomes)
    return [
        info(NAME, "runs / calls / handler seconds", f"{runs} / {calls} / {HANDLER_SECONDS:g}"),
        info(NAME, "calls in their handler at SIGTERM", len(in_flight)),
        info(NAME, "calls taken before SIGTERM, handler started after", len(started_after_term)),
        info(NAME, "calls finished by the old worker after SIGTERM", finished_after),
        info(NAME, "s from activity start to handler start: max (calls > 1 s)",
             f"{max(waits, default=0.0):.1f} ({sum(w > 1.0 for w in waits)})"),
        must_zero(NAME, "calls lost (started on the old worker, not finished there)",
                  len(started_old - ended_old)),
        must_zero(NAME, "calls run twice", cf.more_than_once),
        must_equal(NAME, "calls recorded completed at attempt 1", completed_first_attempt, calls),
        must_equal(NAME, "runs completed", completed, runs),
        info(NAME, "seconds from SIGTERM to the old worker's exit", f"{exited_after:.1f}"),
        Figure(NAME, "old worker exit code", exit_code, "0", exit_code == 0, "must"),
        # The first standard row (tool calls) repeats `calls`; the rest still apply.
        *standard_call_rows(NAME, cf, histories, MAX_ATTEMPTS)[1:],
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]  # fmt: skip
