"""examples/coder, run as its README says: a `toren worker`, `toren run`, then `toren workspace`
gets the files the agent wrote; bash really ran the program's test in the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.conftest import ROOT, DevServer, fetch_history, result_of, task_failures
from toren.client._events import render

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (`bwrap`) is not installed; apt-get install bubblewrap to run these",
)


def toren(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


@needs_bwrap
async def test_coder_writes_tests_in_the_sandbox_and_the_files_come_out(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        "TOREN_STORE": str(tmp_path / "store"),
        "TOREN_WORKSPACES": str(tmp_path / "workspaces"),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", "examples/coder"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_id = f"coder-{uuid.uuid4().hex[:8]}"
    try:
        prompt = "Write a word-frequency counter with a test."
        run = await asyncio.to_thread(
            toren, "run", "examples/coder", prompt, "--id", run_id, env=env
        )
        assert run.returncode == 0, run.stdout + run.stderr
        result = await result_of(client.get_workflow_handle(run_id))
    finally:
        worker.terminate()
        worker.wait(30)

    history = await fetch_history(client, run_id)
    assert not task_failures(history)
    bash = next(
        e for e in render(history) if e["type"] == "ToolCallCompleted" and e["tool"] == "bash"
    )
    ran = json.loads(bash["result"])
    assert ran["exit_code"] == 0, ran
    assert "Ran 2 tests" in ran["stdout"] and "OK" in ran["stdout"]
    assert "Ran 2 tests" in result["text"]

    out = tmp_path / "out"
    got = await asyncio.to_thread(toren, "workspace", run_id, str(out), env=env)
    assert got.returncode == 0, got.stderr
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".py") == [
        "test_wordfreq.py",
        "wordfreq.py",
    ]
    # The files that came out work outside the sandbox too.
    (out / "words.txt").write_text("b a b c b a")
    counted = subprocess.run(
        [sys.executable, "wordfreq.py", "words.txt"],
        capture_output=True, text=True, cwd=out, timeout=30,
    )  # fmt: skip
    assert counted.stdout.splitlines() == ["3 b", "2 a", "1 c"]
