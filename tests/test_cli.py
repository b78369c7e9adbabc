"""What the `toren` command tells a person: where it looked for the server, what a run waits
for, how to go on after Ctrl-C, and event logs of any run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from tests.conftest import DevServer

ROOT = Path(__file__).resolve().parent.parent


def _env(address: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOREN_UI", "TEMPORAL_UI"))}
    return {**env, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT), **extra}


async def _cli(address: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, env=_env(address, **extra), timeout=120,
    )  # fmt: skip


async def test_an_unreachable_server_gives_one_line_saying_where_and_what_to_do(
    tmp_path: Path,
) -> None:
    for args in (["events", "nope"], ["pending"], ["run", str(ROOT / "examples/support"), "hi"]):
        out = await _cli("127.0.0.1:7999", *args)
        assert out.returncode == 1, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert "127.0.0.1:7999" in lines[0] and "TEMPORAL_ADDRESS" in lines[0]
        assert "temporal server start-dev" in lines[0] and "Traceback" not in out.stderr


async def test_piping_into_head_exits_quietly(dev_server: DevServer) -> None:
    command = (
        f"{sys.executable} -m toren.cli check {ROOT / 'examples/support'} "
        f"{ROOT / 'examples/support'} {ROOT / 'examples/support'} | head -1"
    )
    out = await asyncio.to_thread(
        subprocess.run, ["bash", "-o", "pipefail", "-c", command],
        capture_output=True, text=True, env=_env(dev_server.address), timeout=60,
    )  # fmt: skip
    assert "BrokenPipe" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.startswith("✓ agent")


async def test_no_wait_links_the_web_ui_only_where_it_is_known(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent()
    out = await _cli(dev_server.address, "run", str(folder), "hi", "--no-wait")
    assert out.returncode == 0, out.stderr
    assert "8233" not in out.stdout  # the test server's UI is not on 8233
    out = await _cli(
        dev_server.address, "run", str(folder), "hi", "--no-wait", TOREN_UI_URL="http://ui:9/"
    )
    run_id = out.stdout.split()[1]
    assert f"Web UI: http://ui:9/namespaces/default/workflows/{run_id}" in out.stdout
