"""Scenario 3: the dev server stopped and restarted on the same SQLite file and ports mid-run.

A server of its own (the other scenarios keep theirs), two workers on one task queue, and runs
of three sequential `work` calls of 0.5–1.5 s. While the runs are under way the server is
stopped with SIGTERM, left down, started again; later the same with SIGKILL. The workers are
never restarted: the SDK must reconnect by itself, and the figures show they did (their pids
alive at the end, and handlers they started after the last restart).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

from bench.faults.agents import WORK_TOOL, read_records, write_agent
from bench.faults.common import Harness, await_outcome, quiet_runtime
from bench.faults.history import fetch_run_history
from bench.faults.report import (
    Figure,
    call_figures,
    info,
    must_equal,
    standard_call_rows,
)
from toren import client as toren_client
from toren.connect import connect
from toren.testing import DevServer

__all__ = ["run"]

NAME = "3 server restart"
MAX_ATTEMPTS = 3
WORKERS = 2
DOWN_SECONDS = 3.0
CALLS = ("c1", "c2", "c3", "c4")
SCRIPT = [
    *({"tool_calls": [{"id": c, "name": "work", "args": {"which": c}}]} for c in CALLS),
    "done: {last_tool_result}",
]


async def run(h: Harness, runs: int) -> list[Figure]:
    """Run scenario 3 with `runs` runs; return its figures."""
    began = time.monotonic()
    base = h.workdir / "s3"
    record = base / "records.jsonl"
    server = DevServer(base / "server")
    await asyncio.to_thread(server.start)
    try:
        return await _scenario(h, server, runs, record, began)
    finally:
        server.stop()


async def _scenario(
    h: Harness, server: DevServer, runs: int, record: Path, began: float
) -> list[Figure]:
    client = await connect(target_host=server.address, namespace="default", runtime=quiet_runtime())
    folder = write_agent(
        record.parent, "f3_restart", tools={"work": WORK_TOOL}, script=SCRIPT,
        max_attempts=MAX_ATTEMPTS,
    )  # fmt: skip
    workers = [
        h.worker(folder, address=server.address, FAULTS_RECORD=str(record)).start()
        for _ in range(WORKERS)
    ]
    for w in workers:
        await w.ready()
    pids = {w.pid for w in workers}
    handles = [
        await toren_client.start_run(
            client,
            folder.name,
            "three calls across a server restart",
            run_id=f"f3-{i:03d}-{uuid.uuid4().hex[:6]}",
            arguments={c: round(h.rng.uniform(0.5, 1.5), 3) for c in CALLS},
        )
        for i in range(runs)
    ]
    waiting = [asyncio.create_task(await_outcome(hd, timeout=240.0)) for hd in handles]
    restarts: list[str] = []
    alive_after: list[int] = []
    mid_run = 0
    outages: list[tuple[float, float]] = []
    last_up = 0.0
    for n, sig in enumerate((signal.SIGTERM, signal.SIGKILL)):
        await asyncio.sleep(h.rng.uniform(1.5, 3.0) if n == 0 else 2.0)
        done_before = sum(t.done() for t in waiting)
        mid_run += done_before < runs
        stopped = time.time()
        await asyncio.to_thread(server.stop, sig)
        await asyncio.sleep(DOWN_SECONDS)
        healthy_after = await asyncio.to_thread(server.start)
        last_up = time.time()
        outages.append((stopped, last_up))
        restarts.append(
            f"{sig.name}: {last_up - stopped:.1f}s from signal to healthy "
            f"(start took {healthy_after:.1f}s), {done_before}/{runs} runs done before"
        )
        alive_after.append(sum(w.alive() for w in workers))
    outcomes = await asyncio.gather(*waiting)
    alive_end = sum(w.alive() and w.pid in pids for w in workers)
    histories = [await fetch_run_history(client, hd.id) for hd in handles]
    records = read_records(record)
    cf = call_figures(records, histories, MAX_ATTEMPTS)
    after_restart = [r for r in records if r.phase == "start" and r.t > last_up]
    by_original = sum(r.pid in pids for r in after_restart)
    first_after = min((r.t for r in after_restart), default=0.0)
    # The CLI logs temporalio at WARNING and up: what the workers said about the outage.
    complaints = sum(
        ("WARNING" in line or "ERROR" in line) for w in workers for line in w.text().splitlines()
    )
    for w in workers:
        w.stop()
    # Why a call ran twice: its handler returned while the server was down, so the completion
    # never landed and the heartbeat timeout retried it (at-least-once, within max_attempts).
    twice = [call for call, n in cf.executions.items() if n > 1]
    during_outage = 0
    for call in twice:
        first_end = min((r.t for r in records if r.call == call and r.phase == "end"), default=0.0)
        during_outage += any(a - 1.0 <= first_end <= b for a, b in outages)
    figures = [
        info(NAME, "runs / workers / calls per run", f"{runs} / {WORKERS} / {len(CALLS)}"),
    ]
    for text in restarts:
        figures.append(info(NAME, "server restart", text))
    figures += [
        must_equal(NAME, "restarts with runs in flight", mid_run, 2),
        must_equal(NAME, "runs completed", sum(o.status == "completed" for o in outcomes), runs),
        must_equal(NAME, "original workers alive after each restart", min(alive_after), WORKERS),
        must_equal(NAME, "original workers alive at the end", alive_end, WORKERS),
        info(NAME, "workers restarted by the harness", 0),
        info(
            NAME,
            "handlers started after the last restart (by original workers)",
            f"{len(after_restart)} ({by_original})",
        ),
        info(
            NAME,
            "first handler start after the last restart, s",
            f"{first_after - last_up:.1f}" if first_after else "none",
        ),
        info(NAME, "warning/error lines the workers logged", complaints),
        *standard_call_rows(NAME, cf, histories, MAX_ATTEMPTS),
        info(
            NAME,
            "calls run twice whose first attempt returned during an outage",
            f"{during_outage}/{len(twice)}",
        ),
        info(NAME, "duration, s", f"{time.monotonic() - began:.0f}"),
    ]
    return figures
