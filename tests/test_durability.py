"""Worker deaths: a recorded call never runs again; an unrecorded one runs at most max_attempts
times under one idempotency key, then fails closed. Workers here are real subprocesses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, task_failures, wait_for
from toren import client as toren_client

STUCK = """
import json, time
from toren import define_tool

def stuck(args, ctx):
    with open(ctx.env["RECORD_FILE"], "a") as f:
        f.write(json.dumps({"key": ctx.idempotency_key, "attempt": ctx.attempt}) + "\\n")
    time.sleep(float(ctx.env.get("STUCK_SECONDS", "120")))
    return "finished"

tool = define_tool(
    description="Charge a card (slowly).",
    effects="external",
    idempotency="keyed",
    max_attempts=2,
    handler=stuck,
)
"""

QUICK = """
import json
from toren import define_tool

def quick(args, ctx):
    with open(ctx.env["RECORD_FILE"], "a") as f:
        f.write(json.dumps({"key": ctx.idempotency_key, "attempt": ctx.attempt}) + "\\n")
    return "quick done"

tool = define_tool(description="Record once.", effects="external", handler=quick)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""


class Workers:
    """Worker subprocesses for one agent folder."""

    def __init__(self, folder: Path, server: DevServer, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = {**os.environ, "TEMPORAL_ADDRESS": server.address, **env}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "toren.cli", "worker", str(self.folder)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(
    make_agent: Callable[..., Path], dev_server: DevServer, tmp_path: Path
) -> Iterator[Callable[..., Workers]]:
    made: list[Workers] = []

    def make(folder: Path, **env: str) -> Workers:
        w = Workers(folder, dev_server, env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


async def test_killed_worker_runs_a_call_at_most_max_attempts_then_fails_closed(
    client: Client, make_agent: Callable[..., Path], workers: Callable[..., Workers], tmp_path: Path
) -> None:
    record = tmp_path / "charges.jsonl"
    folder = make_agent(
        tools={"charge": STUCK},
        script=[
            {"tool_calls": [{"id": "pay1", "name": "charge", "args": {}}]},
            "model saw: {last_tool_result}",
        ],
        env={"required": ["RECORD_FILE"]},
    )
    w = workers(folder, RECORD_FILE=str(record))
    first = w.start()
    handle = await toren_client.start_run(client, folder.name, "charge it")
    await wait_for(lambda: len(lines(record)) == 1, timeout=60)
    w.kill(first)  # mid-call: the handler is sleeping
    second = w.start()
    # The heartbeat timeout (10 s) notices the dead worker; attempt 2 starts on the new one.
    await wait_for(lambda: len(lines(record)) == 2, timeout=60)
    w.kill(second)
    w.start()
    result = await asyncio.wait_for(handle.result(), timeout=90)
    assert result.text == "model saw: tool charge failed closed after 2 attempts"
    attempts = lines(record)
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["key"] == attempts[1]["key"] == f"{handle.id}:1:pay1"
    assert not task_failures(await fetch_history(client, handle.id))


async def test_recorded_call_never_runs_again_after_a_worker_dies(
    client: Client, make_agent: Callable[..., Path], workers: Callable[..., Workers], tmp_path: Path
) -> None:
    record = tmp_path / "quick.jsonl"
    folder = make_agent(
        tools={"quick": QUICK, "gated": GATED},
        script=[
            {"tool_calls": [{"id": "q", "name": "quick", "args": {}}]},
            {"tool_calls": [{"id": "g", "name": "gated", "args": {}}]},
            "end: {last_tool_result}",
        ],
        env={"required": ["RECORD_FILE"]},
    )
    w = workers(folder, RECORD_FILE=str(record))
    first = w.start()
    handle = await toren_client.start_run(client, folder.name, "go")
    await wait_for(lambda: toren_client.pending(client, handle.id), timeout=60)
    w.kill(first)  # parked on approval, with `quick` recorded in history
    # Approve while no worker runs: the signal waits in history.
    await handle.signal("approve", {"call_id": "g", "by": "ops"})
    w.start()  # replays the history from scratch: `quick` must not run again
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.text == "end: gated ran"
    assert len(lines(record)) == 1
