"""toren's per-turn cost against a bare-Temporal floor, on one dev server.

```bash
.venv/bin/python -m bench.perf.run                       # T = 10,100,500, 3 repeats each
.venv/bin/python -m bench.perf.run --turns 10,100 --repeats 5
.venv/bin/python -m bench.perf.run --address 127.0.0.1:7233   # an existing server instead
```

Without `--address` it starts its own `temporal server start-dev` (SQLite in a temp dir, free
ports, `history.transferProcessorMaxPollRPS=10000`) and stops it at the end. Run it on a quiet
machine: it measures latency on 2 cores shared by the server, the worker and the driver.

The workload, for each T (tool turns):

- `floor`: `PerfFloor` (bench/perf/floor.py): T pairs of a "model" activity (returns a small
  assistant message with one tool call) and a "tool" activity (returns 200 characters), then a
  last "model" call answering. Plain activities, the default converter and sandbox.
- `toren`: an `AgentRun` of an agent generated in a temp dir: `model: mock/scripted`, a script
  of T single tool calls then a final answer, and a no-op tool returning 200 characters with
  `effects="external", idempotency="keyed"` (a normal activity).
- `toren-local`: the same with `effects="none", idempotency="none", timeout_ms=1000`, which
  toren runs as a local activity.

Each (variant, T) gets a fresh worker process (bench/perf/worker.py) on its own task queue,
serving a warm-up run first (2 tool turns) so imports and sandbox set-up are not measured.
Per run it reports the span between the first and the last event of the run's history (all
its runs if it continued as new), the history's events, and the sum of its events'
`ByteSize()`; per worker, its peak RSS (VmHWM, covering the warm-up and all repeats) and the
CPU time it and the server (when started here) used per turn over the measured runs.
Then, for the smallest T, every event kind per turn and its bytes, toren against the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import temporalio
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.perf.floor import MODEL, PerfFloor
from toren.testing import DevServer, temporal_cli

__all__ = ["main"]

VARIANTS = ("floor", "toren", "toren-local")
RESULT = "x" * 200
TOOLS = {
    "toren": 'effects="external", idempotency="keyed"',
    "toren-local": 'effects="none", idempotency="none", timeout_ms=1000',
}
TOOL_SOURCE = """
from toren import define_tool

tool = define_tool(
    description="Does nothing; returns 200 characters.",
    input={{"type": "object", "properties": {{"i": {{"type": "integer"}}}}}},
    {contract},
    handler=lambda args, ctx: "x" * 200,
)
"""


@dataclass
class Sample:
    """One measured run."""

    seconds: float
    events: int
    bytes: int
    runs: int
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    kind_bytes: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class Result:
    """All runs of one variant at one T, and its worker's peak RSS."""

    variant: str
    turns: int
    samples: list[Sample]
    rss_kb: int
    worker_cpu: float
    """Worker CPU seconds over the measured runs (user + system)."""
    server_cpu: float | None
    """Server CPU seconds over the measured runs, when the benchmark started the server."""

    def cpu_ms_per_turn(self, seconds: float | None) -> float | None:
        """CPU milliseconds per tool turn, over all measured runs."""
        if seconds is None:
            return None
        return seconds * 1000 / (self.turns * len(self.samples))

    @property
    def ms_per_turn(self) -> list[float]:
        """Each run's milliseconds per tool turn."""
        return [s.seconds * 1000 / self.turns for s in self.samples]


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used so far (None without a pid)."""
    if pid is None:
        return None
    # Fields 14 and 15 of /proc/<pid>/stat, counted after the parenthesised command name.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_agent(root: Path, variant: str, turns: int, heartbeat_s: float | None = None) -> Path:
    """An agent folder for `variant`: T tool turns of `noop`, then a final answer.

    `heartbeat_s` sets agent.yaml's `heartbeatTimeoutS` (unset: toren's default).
    """
    kind = "local" if variant == "toren-local" else "ext"
    hb = "" if heartbeat_s is None else f"_hb{heartbeat_s:g}"
    name = f"perf_{kind}{hb}_{turns}"
    folder = root / name
    (folder / "tools").mkdir(parents=True)
    config: dict[str, Any] = {
        "name": name,
        "model": "mock/scripted",
        "limits": {"maxStepsPerTask": turns + 1},
    }
    if heartbeat_s is not None:
        config["heartbeatTimeoutS"] = heartbeat_s
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    (folder / "instructions.md").write_text("You are a benchmark.")
    script: list[Any] = [
        {"tool_calls": [{"name": "noop", "args": {"i": i}}]} for i in range(1, turns + 1)
    ]
    (folder / "mock_script.yaml").write_text(yaml.safe_dump([*script, "done"]))
    source = TOOL_SOURCE.format(contract=TOOLS[variant])
    (folder / "tools" / "noop.py").write_text(textwrap.dedent(source))
    return folder


class WorkerProcess:
    """A worker subprocess; `peak_rss_kb()` before leaving the `with` block."""

    def __init__(self, address: str, variant: str, target: str, logdir: Path) -> None:
        self.ready = logdir / f"{variant}-{Path(target).name}.ready"
        self.log = logdir / f"{variant}-{Path(target).name}.log"
        kind = "floor" if variant.startswith("floor") else "toren"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.perf.worker", address, kind, target, str(self.ready)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def __enter__(self) -> WorkerProcess:
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def peak_rss_kb(self) -> int:
        """The worker's peak resident set (VmHWM), in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def kind_of(event: Any, activity_types: dict[int, str]) -> str:
    """An event's kind: its type, and for activity events whether model or tool."""
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    name = "".join(part.capitalize() for part in name.split("_"))
    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        kind = event.activity_task_scheduled_event_attributes.activity_type.name
        activity_types[event.event_id] = "model" if kind in ("toren.call_model", MODEL) else "tool"
        return f"{name} ({activity_types[event.event_id]})"
    for attr in ("activity_task_started", "activity_task_completed"):
        if event.HasField(f"{attr}_event_attributes"):
            scheduled = getattr(event, f"{attr}_event_attributes").scheduled_event_id
            return f"{name} ({activity_types.get(scheduled, '?')})"
    if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
        return f"{name} ({event.marker_recorded_event_attributes.marker_name})"
    return name


async def measure(client: Client, workflow_id: str, first_run_id: str | None) -> Sample:
    """Read a finished run's history, following continue-as-new to the end of the chain."""
    events: list[Any] = []
    run_id, runs = first_run_id, 0
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        events += history.events
        runs += 1
        last = history.events[-1]
        if last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            break
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    begin, end = events[0].event_time.ToDatetime(), events[-1].event_time.ToDatetime()
    sample = Sample((end - begin).total_seconds(), len(events), 0, runs)
    activity_types: dict[int, str] = {}
    for event in events:
        kind, size = kind_of(event, activity_types), event.ByteSize()
        sample.bytes += size
        sample.kinds[kind] += 1
        sample.kind_bytes[kind] += size
    return sample


async def run_once(client: Client, variant: str, turns: int, target: str, warm: bool) -> Sample:
    """One run of `variant` with `turns` tool turns (2 for a warm-up); its measurements."""
    if variant == "floor":
        floor = await client.start_workflow(
            PerfFloor.run,
            2 if warm else turns,
            id=f"floor-{os.urandom(6).hex()}",
            task_queue=target,
        )
        assert await floor.result() == "done"
        workflow_id, run_id = floor.id, floor.first_execution_run_id or floor.result_run_id
    else:
        from toren import client as toren_client

        # The scripted model answers by the count of earlier assistant messages: prior ones
        # make a warm-up start near the script's end.
        prior = [{"role": "assistant", "content": "warm-up"}] * max(turns - 2, 0) if warm else []
        run = await toren_client.start_run(client, Path(target).name, "go", messages=prior or None)
        result = await run.result()
        if result.text != "done":
            raise RuntimeError(f"{variant} T={turns} answered {result.text!r}")
        workflow_id, run_id = run.id, run.first_execution_run_id or run.result_run_id
    return await measure(client, workflow_id, run_id)


async def bench(
    address: str, turns: list[int], repeats: int, root: Path, server_pid: int | None = None
) -> list[Result]:
    """Run every variant at every T; return the results."""
    from toren.connect import connect

    client = await connect(target_host=address)
    results = []
    for t in turns:
        for variant in VARIANTS:
            target = f"perf-floor-{t}" if variant == "floor" else str(write_agent(root, variant, t))
            with WorkerProcess(address, variant, target, root) as worker:
                await run_once(client, variant, t, target, warm=True)
                worker_before, server_before = cpu_seconds(worker.proc.pid), cpu_seconds(server_pid)
                samples = []
                for i in range(repeats):
                    started = time.monotonic()
                    samples.append(await run_once(client, variant, t, target, warm=False))
                    print(
                        f"  T={t} {variant} run {i + 1}/{repeats}: "
                        f"{time.monotonic() - started:.1f}s wall",
                        file=sys.stderr,
                        flush=True,
                    )
                rss = worker.peak_rss_kb()
                worker_cpu = (cpu_seconds(worker.proc.pid) or 0.0) - (worker_before or 0.0)
                server_after = cpu_seconds(server_pid)
                server_cpu = (
                    server_after - server_before
                    if server_after is not None and server_before is not None
                    else None
                )
            results.append(Result(variant, t, samples, rss, worker_cpu, server_cpu))
    return results


def report(results: list[Result]) -> str:
    """The printed report: the table, the marginal cost per turn, the per-turn events."""
    lines = []
    floor = {r.turns: statistics.median(r.ms_per_turn) for r in results if r.variant == "floor"}
    lines.append(
        f"{'T':>4}  {'variant':<12}{'ms/turn median [min-max]':>26}{'x floor':>9}{'+ms':>7}"
        f"{'events/turn':>13}{'bytes/turn':>12}{'runs':>6}{'peak RSS':>10}"
        f"{'worker CPU':>12}{'server CPU':>12}"
    )
    for r in results:
        ms = r.ms_per_turn
        med = statistics.median(ms)
        events = statistics.median(s.events for s in r.samples) / r.turns
        size = statistics.median(s.bytes for s in r.samples) / r.turns
        runs = max(s.runs for s in r.samples)
        lines.append(
            f"{r.turns:>4}  {r.variant:<12}{f'{med:6.1f} [{min(ms):5.1f}-{max(ms):5.1f}]':>26}"
            f"{med / floor[r.turns]:>9.2f}{med - floor[r.turns]:>+7.1f}"
            f"{events:>13.1f}{size:>12.0f}{runs:>6}{r.rss_kb / 1024:>8.0f}MB"
            f"{_ms(r.cpu_ms_per_turn(r.worker_cpu)):>12}{_ms(r.cpu_ms_per_turn(r.server_cpu)):>12}"
        )
    sizes = sorted({r.turns for r in results})
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        lines.append(f"\nmarginal cost of one more turn (T={lo} -> T={hi}, medians):")
        for variant in VARIANTS:
            a = next(r for r in results if r.variant == variant and r.turns == lo)
            b = next(r for r in results if r.variant == variant and r.turns == hi)

            def slope(res_a: Result, res_b: Result, key: str) -> float:
                va = statistics.median(getattr(s, key) for s in res_a.samples)
                vb = statistics.median(getattr(s, key) for s in res_b.samples)
                return float((vb - va) / (hi - lo))

            lines.append(
                f"  {variant:<12}{slope(a, b, 'seconds') * 1000:7.1f} ms"
                f"{slope(a, b, 'events'):8.1f} events{slope(a, b, 'bytes'):9.0f} bytes"
            )
    t = sizes[0]
    by_variant = {r.variant: r for r in results if r.turns == t}
    kinds = sorted(
        {k for r in by_variant.values() for k in r.samples[0].kinds},
        key=lambda k: (-max(r.samples[0].kinds[k] for r in by_variant.values()), k),
    )
    lines.append(f"\nevents per turn at T={t} (one run; count / bytes, per tool turn):")
    lines.append(f"{'event':<40}" + "".join(f"{v:>18}" for v in VARIANTS))
    for kind in kinds:
        cells = []
        for variant in VARIANTS:
            s = by_variant[variant].samples[0]
            cells.append(f"{s.kinds[kind] / t:6.1f} /{s.kind_bytes[kind] / t:7.0f} B")
        lines.append(f"{kind:<40}" + "".join(f"{c:>18}" for c in cells))
    firsts = [by_variant[v].samples[0] for v in VARIANTS]
    totals = "".join(f"{f'{s.events / t:6.1f} /{s.bytes / t:7.0f} B':>18}" for s in firsts)
    lines.append(f"{'total':<40}{totals}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def main() -> None:
    """Parse arguments, run the benchmark, print the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.perf.run", description=__doc__)
    parser.add_argument("--turns", default="10,100,500", help="comma-separated T values")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per variant and T")
    parser.add_argument("--address", help="an existing Temporal server (default: start one)")
    args = parser.parse_args()
    turns = [int(t) for t in args.turns.split(",")]
    root = Path(tempfile.mkdtemp(prefix="toren-perf-agents-"))
    cli = subprocess.run([temporal_cli(), "--version"], capture_output=True, text=True)
    header = (
        f"toren perf: temporalio {temporalio.__version__}, {cli.stdout.strip()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.repeats} repeats"
    )
    began = time.monotonic()
    try:
        if args.address:
            results = asyncio.run(bench(args.address, turns, args.repeats, root))
        else:
            with DevServer(ui=False) as server:
                pid = server.proc.pid if server.proc else None
                results = asyncio.run(bench(server.address, turns, args.repeats, root, pid))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(header)
    print(report(results))
    print(
        f"\n{time.monotonic() - began:.0f}s in all; load at the end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
