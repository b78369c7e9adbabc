"""`./demo.sh` on other ports: everything it runs and prints uses the server it started."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from toren.testing import DevServer, free_port

ROOT = Path(__file__).resolve().parent.parent


async def test_demo_on_other_ports_uses_them_and_prints_commands_that_work(
    dev_server: DevServer, client: Client
) -> None:
    port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "TEMPORAL_DEV_PORT": str(port),
        "TEMPORAL_DEV_UI_PORT": str(ui_port),
        # A decoy: the demo must not send its worker or run to whatever this names.
        "TEMPORAL_ADDRESS": dev_server.address,
        "DEMO_SKIP_INSTALL": "1",
        "PYTHONPATH": str(ROOT),
    }
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        env.pop(key, None)
    try:
        demo = subprocess.run(
            [str(ROOT / "demo.sh")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        stop = subprocess.run(
            [str(ROOT / "temporal-dev.sh"), "stop"], env=env, capture_output=True, text=True
        )
    out = demo.stdout
    assert demo.returncode == 0, out + demo.stderr
    assert "RunCompleted" in out, out
    address = f"127.0.0.1:{port}"
    assert f"TEMPORAL_ADDRESS={address} .venv/bin/toren approve support-demo-" in out, out
    assert f"TEMPORAL_ADDRESS={address} .venv/bin/toren events support-demo-" in out, out
    assert f"http://localhost:{ui_port}/namespaces/default/workflows/support-demo-" in out, out
    assert f"TEMPORAL_DEV_PORT={port} ./temporal-dev.sh stop" in out, out
    assert "localhost:8233" not in out and ":7233" not in out, out
    assert "source .venv/bin/activate" in out, out
    assert f"Temporal dev server on port {port} stopped" in stop.stdout, stop
    # The run went to the demo's server, not to the one TEMPORAL_ADDRESS named before.
    run_id = re.findall(r"toren events (support-demo-\d+)", out)[0]
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle(run_id).describe()
