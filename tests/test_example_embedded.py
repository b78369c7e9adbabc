"""examples/embedded: `python app.py` runs the app's own workflow, which asks toren's agent as a
child workflow on the app's own Worker, and acts on the agent's typed answer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from temporalio.client import Client

from tests.conftest import ROOT, DevServer, fetch_history, task_failures
from toren.client._events import render

APP = ROOT / "examples" / "embedded" / "app.py"


async def test_the_apps_workflow_runs_the_agent_as_a_child(
    client: Client, dev_server: DevServer
) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(APP), "A-1001"],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == (
        "A-1001: refund issued for A-1001 (Order A-1001 (a kettle, 149.00) was delivered damaged.)"
    )
    workflow_id = lines[0].removeprefix("workflow ")
    parent = await fetch_history(client, workflow_id)
    child = await fetch_history(client, f"{workflow_id}/reviewer")
    assert not task_failures(parent) and not task_failures(child)
    events = render(child)
    calls = [e["tool"] for e in events if e["type"] == "ToolCallStarted"]
    assert calls == ["lookup_order"]
    # The child ran as a child: its parent is the app's workflow.
    description = await client.get_workflow_handle(f"{workflow_id}/reviewer").describe()
    assert description.parent_id == workflow_id
