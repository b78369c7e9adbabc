"""Worker subprocesses: `python -m toren.cli worker <agent dir>` with TEMPORAL_ADDRESS set.

Each worker writes its log to its own file, so a scenario can show what a worker said (the
SDK's reconnect warnings during a server restart, the graceful-shutdown line on SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["WorkerProc", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: workers run there so `toren` imports from this checkout."""


class WorkerProc:
    """One worker subprocess serving `folder`; `start` again after a kill for a fresh one."""

    counter = 0

    def __init__(self, folder: Path, address: str, logs: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.logs = logs
        self.env = {**os.environ, **env, "TEMPORAL_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
        # Never inherit a namespace or profile meant for another cluster.
        for name in ("TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE"):
            self.env.pop(name, None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        """The pid of the current process (0 before the first start)."""
        return self.proc.pid if self.proc else 0

    def start(self) -> WorkerProc:
        """Start a fresh worker process (the previous one must be gone)."""
        WorkerProc.counter += 1
        self.log = self.logs / f"worker-{self.folder.name}-{WorkerProc.counter}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toren.cli", "worker", str(self.folder)],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.started_at = time.monotonic()
        return self

    async def ready(self, timeout: float = 60.0) -> float:
        """Wait until the worker logged that it serves its agent; return the seconds it took."""
        assert self.proc and self.log
        while time.monotonic() - self.started_at < timeout:
            if "serving agent" in self.log.read_text(errors="replace"):
                # The pollers start right after this line; a moment more and they are polling.
                await asyncio.sleep(0.2)
                return time.monotonic() - self.started_at
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.05)
        raise RuntimeError(f"worker for {self.folder.name} not ready in {timeout:g}s")

    def kill(self) -> tuple[int, float]:
        """SIGKILL the worker and reap it; return (pid, wall-clock time of the kill)."""
        assert self.proc
        pid = self.proc.pid
        when = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return pid, when

    def terminate(self) -> float:
        """Send SIGTERM (a clean shutdown); return the wall-clock time it was sent."""
        assert self.proc
        when = time.time()
        self.proc.send_signal(signal.SIGTERM)
        return when

    def alive(self) -> bool:
        """Whether the current process still runs."""
        return self.proc is not None and self.proc.poll() is None

    def text(self) -> str:
        """What the current process logged so far."""
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def stop(self) -> None:
        """Kill the process if it still runs (cleanup)."""
        if self.alive():
            assert self.proc
            self.proc.kill()
            self.proc.wait()
