"""examples/analyst, run as its README says: `toren attach` the shipped PDF and XLSX, a `toren
worker` with `SQL_DATABASE_URL` on the shipped SQLite file, `toren run --attach`; the answer
is the typed output, and the tools really read the database and both files."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import Client

from tests.conftest import ROOT, DevServer, fetch_history, result_of, task_failures
from toren.client._events import render

EXAMPLE = ROOT / "examples" / "analyst"
PROMPT = "Which regions met their Q3 2024 revenue target?"


def toren(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


def test_make_data_makes_the_committed_files_again(tmp_path: Path) -> None:
    # The mock script reads the attachments by id, a hash of their bytes: a script that no
    # longer made the same bytes would leave the example reading files nobody attached.
    out = subprocess.run(
        [sys.executable, str(EXAMPLE / "make_data.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for name in ("board_report.pdf", "targets.xlsx"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / "data" / name).read_bytes(), name


async def test_analyst_answers_from_sql_and_attachments_as_typed_output(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        "TOREN_STORE": str(tmp_path / "store"),
        "SQL_DATABASE_URL": "sqlite:///examples/analyst/data/sales.db",
    }
    attached = await asyncio.to_thread(
        toren,
        "attach",
        "examples/analyst/data/board_report.pdf",
        "examples/analyst/data/targets.xlsx",
        env=env,
    )
    assert attached.returncode == 0, attached.stderr
    ids = [line.split()[0] for line in attached.stdout.splitlines() if line.startswith("att_")]
    assert ids == ["att_62d1250268d03a97", "att_a794c81759fef4a1"]  # as mock_script.yaml reads

    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", "examples/analyst"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_id = f"analyst-{uuid.uuid4().hex[:8]}"
    try:
        args = ["run", "examples/analyst", PROMPT, "--id", run_id]
        for file_id in ids:
            args += ["--attach", file_id]
        run = await asyncio.to_thread(toren, *args, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        result = await result_of(client.get_workflow_handle(run_id))
    finally:
        worker.terminate()
        worker.wait(30)

    assert result["output"]["regions"] == [
        {"region": "EU", "revenue": 1920000, "target": 1800000, "met_target": True},
        {"region": "US", "revenue": 638000, "target": 700000, "met_target": False},
    ]
    history = await fetch_history(client, run_id)
    assert not task_failures(history)
    results = {
        e["callId"]: e["result"] for e in render(history) if e["type"] == "ToolCallCompleted"
    }
    # The figures in the scripted answer are the ones the real tools returned.
    rows = json.loads(results["call_sql"])["rows"]
    assert rows == [{"region": "EU", "revenue": 1920000}, {"region": "US", "revenue": 638000}]
    targets = json.loads(results["call_targets"])
    assert targets["name"] == "targets.xlsx"
    assert "EU,2024-Q3,1800000" in targets["text"] and "US,2024-Q3,700000" in targets["text"]
    report = json.loads(results["call_report"])
    assert report["name"] == "board_report.pdf" and "cargo bikes launched" in report["text"]
