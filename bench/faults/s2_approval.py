"""Scenario 2: the worker SIGKILLed while runs wait for approval; approved with no worker up.

Each run calls `work` (c1, recorded before the run parks), then `gated` (g1, approval
"always"). When every run waits, the worker is SIGKILLed, each run gets an `approve` signal
while no worker runs (the signal waits in history), then a fresh worker replays every history
from scratch: c1 must not run again and g1 must run exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.faults.agents import GATED_TOOL, WORK_TOOL, read_records, write_agent
from bench.faults.common import Harness, await_outcome
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

NAME = "2 approval + SIGKILL"
MAX_ATTEMPTS = 3
SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "work", "args": {"which": "c1"}}]},
    {"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]},
    "done: {last_tool_result}",
]


async def run(h: Harness, runs: int) -> list[Figure]:
    """Run scenario 2 with `runs` runs; return its figures."""
    began = time.monotonic()
    base = h.workdir / "s2"
    record = base / "records.jsonl"
    folder = write_agent(
        base,
        "f2_approval",
        tools={"work": WORK_TOOL, "gated": GATED_TOOL},
        script=SCRIPT,
        max_attempts=MAX_ATTEMPTS,
    )
    worker = h.worker(folder, FAULTS_RECORD=str(record)).start()
    await worker.ready()
    handles = [
        await toren_client.start_run(
            h.client,
            folder.name,
            "refund, with a person's approval",
            run_id=f"f2-{i:03d}-{uuid.uuid4().hex[:6]}",
            arguments={"c1": 0.2},
        )
        for i in range(runs)
    ]

    async def parked(handle_id: str) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if await toren_client.pending(h.client, handle_id):
                return True
            await asyncio.sleep(0.2)
        return False

    parked_ok = await asyncio.gather(*(parked(hd.id) for hd in handles))
    worker.kill()
    approved_at = time.time()
    for handle in handles:
        await handle.signal("approve", {"call_id": "g1", "by": "fault-harness"})
    # Nothing serves the queue for a moment: the signals wait in the histories.
    await asyncio.sleep(1.0)
    worker.start()
    await worker.ready()
    outcomes = await asyncio.gather(*(await_outcome(hd, timeout=120.0) for hd in handles))
    histories = [await fetch_run_history(h.client, hd.id) for hd in handles]
    refused = 0
    for handle in handles:
        refused += len(await handle.query("refused_signals"))
    records = read_records(record)
    cf = call_figures(records, histories, MAX_ATTEMPTS)
    gated_runs = {
        (hd.id): sum(r.call == (hd.id, "g1") and r.phase == "start" for r in records)
        for hd in handles
    }
    gated_before_approval = sum(
        r.call_id == "g1" and r.phase == "start" and r.t < approved_at for r in records
    )
    not_once = sum(n != 1 for n in gated_runs.values())
    c1_again = sum(cf.executions.get((hd.id, "c1"), 0) != 1 for hd in handles)
    return [
        must_equal(NAME, "runs parked on approval before the kill", sum(parked_ok), runs),
        must_equal(
            NAME,
            "runs completed",
            sum(o.status == "completed" for o in outcomes),
            runs,
        ),
        must_equal(
            NAME,
            "runs answering 'done: gated ran'",
            sum(o.text == "done: gated ran" for o in outcomes),
            runs,
        ),
        must_zero(NAME, "approval signals refused", refused),
        must_zero(NAME, "gated calls not run exactly once", not_once),
        must_zero(NAME, "gated calls run before the approval", gated_before_approval),
        must_zero(NAME, "pre-approval calls (c1) run other than once", c1_again),
        *standard_call_rows(NAME, cf, histories, MAX_ATTEMPTS),
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]
