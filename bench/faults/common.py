"""What every scenario shares: the harness context, waiting for results, polling records."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError

from bench.faults.agents import Record, read_records
from bench.faults.workers import WorkerProc
from toren.testing import DevServer

__all__ = ["Harness", "Outcome", "await_outcome", "quiet_runtime", "wait_records"]

_RUNTIME: Runtime | None = None


def quiet_runtime() -> Runtime:
    """A Temporal runtime for the harness's clients that logs errors only.

    The default one prints a warning for every retried RPC, and the server-restart scenario
    makes hundreds of those on purpose; the table is the output that matters.
    """
    global _RUNTIME
    if _RUNTIME is None:
        quiet = TelemetryFilter(core_level="ERROR", other_level="ERROR")
        _RUNTIME = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=quiet)))
    return _RUNTIME


@dataclass
class Harness:
    """The shared dev server, client and scratch space, and the options of this invocation."""

    server: DevServer
    client: Client
    workdir: Path
    rng: random.Random
    short: bool
    workers: list[WorkerProc] = field(default_factory=list)

    def worker(self, folder: Path, address: str | None = None, **env: str) -> WorkerProc:
        """A worker for `folder` on this harness's server (or `address`), not yet started."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        w = WorkerProc(folder, address or self.server.address, logs, env)
        self.workers.append(w)
        return w

    def cleanup(self) -> None:
        """Kill every worker still running (the harness is done or gave up)."""
        for w in self.workers:
            w.stop()


@dataclass
class Outcome:
    """How a run ended, as its client saw it."""

    status: str
    """completed, failed, or timeout (the harness stopped waiting)."""
    text: str = ""
    failure_type: str = ""
    seconds: float = 0.0


async def await_outcome(handle: WorkflowHandle[Any, Any], timeout: float) -> Outcome:
    """Wait for a run's result; ride out RPC errors (the server may be restarting)."""
    began = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - began)
        if left <= 0:
            return Outcome("timeout", seconds=time.monotonic() - began)
        try:
            result = await asyncio.wait_for(handle.result(), left)
            return Outcome("completed", text=result.text, seconds=time.monotonic() - began)
        except WorkflowFailureError as err:
            cause = err.cause
            return Outcome(
                "failed",
                text=str(cause),
                failure_type=str(getattr(cause, "type", "") or ""),
                seconds=time.monotonic() - began,
            )
        except TimeoutError:
            return Outcome("timeout", seconds=time.monotonic() - began)
        except RPCError:
            await asyncio.sleep(0.5)


async def wait_records(
    path: Path, predicate: Callable[[Record], bool], timeout: float, every: float = 0.02
) -> Record | None:
    """The first record matching `predicate`, polling the file; None after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in read_records(path):
            if predicate(record):
                return record
        await asyncio.sleep(every)
    return None
