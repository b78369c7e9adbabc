"""`temporal-dev.sh`: the server it starts outlives the terminal that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from toren.testing import free_port

ROOT = Path(__file__).resolve().parent.parent


def _healthy(port: int) -> bool:
    return (
        subprocess.run(
            [str(ROOT / ".venv/bin/temporal"), "operator", "cluster", "health"]
            + ["--address", f"127.0.0.1:{port}"],
            capture_output=True,
            timeout=30,
        ).returncode
        == 0
    )


def test_dev_server_outlives_the_terminal_that_started_it(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TEMPORAL_DEV_PORT": str(port),
        "TEMPORAL_DEV_UI_PORT": str(free_port()),
        "TEMPORAL_DEV_DB": str(tmp_path / "dev.sqlite"),
    }
    script = str(ROOT / "temporal-dev.sh")
    output = tmp_path / "terminal.log"
    # A stand-in for a terminal's shell: its own session, the script run inside it, then idle.
    with output.open("wb") as out:
        terminal = subprocess.Popen(
            ["bash", "-c", f"{script} && exec sleep 120"],
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _healthy(port):
            assert terminal.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "the dev server did not start in 60 s"
            time.sleep(0.5)
        # Closing a terminal sends SIGHUP to its session's processes.
        os.killpg(terminal.pid, signal.SIGHUP)
        terminal.wait(timeout=10)
        time.sleep(2)
        assert _healthy(port), "the dev server died with the terminal that started it"
    finally:
        if terminal.poll() is None:
            os.killpg(terminal.pid, signal.SIGKILL)
        stop = subprocess.run([script, "stop"], env=env, capture_output=True, text=True)
    assert f"Temporal dev server on port {port} stopped" in stop.stdout, stop
    assert not _healthy(port)
