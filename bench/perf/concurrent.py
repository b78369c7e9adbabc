"""toren under concurrency against a bare-Temporal floor: N runs of T turns at once, and many
runs parked on an approval.

```bash
.venv/bin/python -m bench.perf.concurrent                          # N = 1,20,100; T = 1,10,100
.venv/bin/python -m bench.perf.concurrent --max-turns 0            # with N=100 x T=100 too
.venv/bin/python -m bench.perf.concurrent --runs 1,20 --turns 1,10 --parked 200
.venv/bin/python -m bench.perf.concurrent --parked 0               # no parked mode
.venv/bin/python -m bench.perf.concurrent --runs 20 --turns 10 --parked 0 --py-spy /tmp/prof
.venv/bin/python -m bench.perf.concurrent --variants toren         # toren only
```

Flags:

- `--runs`: comma-separated N (runs at once); default 1,20,100.
- `--turns`: comma-separated T (tool turns per run); default 1,10,100.
- `--max-turns`: skip a cell of more than this many N*T turns; default 1,000, which leaves
  N=100 x T=100 out of the default invocation (0 keeps every cell). On the 2-core machine it
  was written on, with other work running, N=20 x T=10 ran at 6-8 turns/s (the dev server
  spent 85-95 ms of CPU per turn): a 10,000-turn cell would take over 20 minutes a variant.
- `--parked`: runs parked at once (0 skips the mode); default 1,000.
- `--variants`: comma-separated, from `floor`, `floor-hb`, `toren` and `toren-nohb`; default
  `floor,toren`. `floor-hb` is the floor with toren's 10 s heartbeat timeout on every activity:
  the server keeps a heartbeat timer per call, which toren pays for noticing a dead worker's
  call in seconds (parked mode skips it).
  `toren-nohb` is toren with `heartbeatTimeoutS: 0` in agent.yaml (no heartbeat timeout: a
  dead worker's call is retried at its own timeout, as the floor's is); against `floor` it
  shows what toren adds besides that guarantee (parked mode skips it too).
- `--settle`: seconds the server's CPU and operations go on being counted after a cell's last
  run closed, before the next cell starts; default 15. The server keeps a timer per workflow
  task (10 s) and per activity, firing at its earliest timeout whether or not the task or
  activity has ended: toren's 10 s heartbeat timeout falls inside those seconds, the
  activities' start-to-close timeouts (the same for toren and the floor: 5 minutes a model
  call, 132 s a tool call) long after, on closed runs. Without it a cell's timers fire in the
  next cell and are counted there. The server's idle CPU over those seconds (measured once,
  before the first cell) is taken off; in a cell of a handful of turns that estimate can
  outweigh the cell itself, and its server CPU comes out meaningless (even negative).
- `--repeats`: batches per (N, T, variant), the variants taking turns (floor, toren, floor,
  toren, ...) so a slow minute of the machine falls on both; default 1. With more than one, a
  second table gives each figure's median over the repeats and its ratio to the floor's median
  (and to `floor-hb`'s when it ran). A cell of 200 turns lasts about 3 s here, and one batch
  of it moves by 10% from one invocation to the next.
- `--server-ops`: print, per turn, each persistence request and queue task the server counted
  (its Prometheus metrics), one column per variant.
- `--timeout`: seconds a run may take before it counts as failed; default 600.
- `--py-spy DIR`: record each cell's worker (floor and toren) with `py-spy record --gil
  --format raw` into DIR and print its top functions (needs py-spy in the venv and ptrace
  rights, e.g. root).
- `--address`: an existing Temporal server instead of starting one (its CPU is then not
  measured).

The workload is bench/perf/run.py's: `floor` is `PerfFloor` (T "model" + "tool" activity
pairs and a final "model" call, bench/perf/floor.py); `toren` an `AgentRun` of a scripted
agent (`mock/scripted`, T single calls of a no-op tool returning 200 characters with
`effects="external", idempotency="keyed"`, then an answer). Both run on one dev server started
here (as run.py's, with `history.transferProcessorMaxPollRPS=10000`).

Each (variant, N, T) cell gets a fresh worker process (bench/perf/worker.py) that serves one
warm-up run first; then the driver starts N runs at once and waits for all of them. Printed per
cell: turns/s (N*T over the span from the first start to the last result), the worker's and
the server's CPU milliseconds per turn (utime + stime from /proc/<pid>/stat, before and after
the batch and its `--settle` seconds: steadier than wall time), p50/p99 run time (start call
to result, in the driver), the worker's peak RSS (VmHWM, including the warm-up), the failed
runs, and the server's work per turn as its own Prometheus metrics count it (a dev server
started here serves them): `DB ops`, its persistence requests (SQLite reads and writes), and
`tasks`, the transfer, timer and visibility queue tasks it processed. Those counts do not move
with the machine's load, as CPU time does.

Parked mode (`--parked K`): K runs of one gated tool call (`approval="always"`) started at
once, waiting until visibility counts all K as `TorenStatus="waiting_approval"`; the floor
equivalent is `PerfFloorParked` (a "model" call, an upsert of the same search attribute, a
wait on an `approve` signal, the "tool" call and a final "model" call). Printed: the time to
send every start call (`START_CONCURRENCY` in flight), the time until all are parked, the
worker's RSS once it polls (VmRSS, before any run), while all are parked (VmRSS), the growth
per parked run (KB/run: the two apart, over K), its peak (VmHWM), and the time from sending the
first `approve` signal to the last run closing (its close time in visibility), with the
failed runs.

The driver, the worker and the server share the machine's cores: on a busy 2-core machine
absolute figures are noisy, ratios between variants less so.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import temporalio
import yaml
from temporalio.client import Client, WorkflowExecutionStatus

from bench.perf.floor import PerfFloor, PerfFloorParked
from bench.perf.run import TOOL_SOURCE, TOOLS, WorkerProcess, cpu_seconds, write_agent
from toren.agent._spec import DEFAULT_HEARTBEAT_TIMEOUT_S
from toren.testing import DevServer, temporal_cli

__all__ = ["main"]

VARIANTS = ("floor", "floor-hb", "toren", "toren-nohb")
FLOOR_HEARTBEAT_S = DEFAULT_HEARTBEAT_TIMEOUT_S
"""`floor-hb`'s heartbeat timeout on every activity: toren's default."""
PY_SPY = str(Path(sys.executable).parent / "py-spy")
START_CONCURRENCY = 50
"""Start calls in flight at once in parked mode (1,000 unbounded ones time out on 2 cores)."""


@dataclass
class Cell:
    """One (variant, N, T) batch."""

    variant: str
    runs: int
    turns: int
    wall: float
    """Seconds from the first start call to the last result."""
    times: list[float]
    """Each successful run's seconds, start call to result."""
    failed: int
    worker_cpu: float
    server_cpu: float | None
    rss_kb: int
    profile: Path | None = None
    server_ops: collections.Counter[str] = field(default_factory=collections.Counter)
    """What the server did for the batch, counted by its own metrics (`server_counts`)."""

    def ops_per_turn(self, prefix: str) -> float | None:
        """The server's counted operations of a kind (`persistence`, `task`) per turn."""
        if not self.server_ops:
            return None
        total = sum(n for key, n in self.server_ops.items() if key.startswith(prefix + ":"))
        return total / (self.runs * self.turns)

    def per_turn_ms(self, seconds: float | None) -> str:
        """CPU milliseconds per turn over the whole batch, as printed."""
        if seconds is None:
            return "-"
        return f"{seconds * 1000 / (self.runs * self.turns):.2f}"


@dataclass
class Parked:
    """One parked batch."""

    variant: str
    runs: int
    start_s: float
    """Seconds to send all start calls."""
    park_s: float
    """Seconds from the first start call until visibility counts all runs parked."""
    release_s: float
    rss_parked_kb: int
    rss_peak_kb: int
    failed: int
    rss_idle_kb: int = 0
    """The worker's RSS once it polls, before the first start call."""


def memory_kb(pid: int, field: str) -> int:
    """A field of /proc/<pid>/status (`VmRSS`, `VmHWM`), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def write_gated_agent(root: Path) -> Path:
    """An agent of one call to a gated no-op tool, then an answer."""
    folder = root / "perf_parked"
    (folder / "tools").mkdir(parents=True)
    config = {"name": "perf_parked", "model": "mock/scripted", "limits": {"maxStepsPerTask": 2}}
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    (folder / "instructions.md").write_text("You are a benchmark.")
    script = [{"tool_calls": [{"name": "noop", "args": {"i": 1}}]}, "done"]
    (folder / "mock_script.yaml").write_text(yaml.safe_dump(script))
    contract = TOOLS["toren"] + ', approval="always"'
    (folder / "tools" / "noop.py").write_text(
        textwrap.dedent(TOOL_SOURCE.format(contract=contract))
    )
    return folder


async def one_run(
    client: Client, variant: str, turns: int, target: str, timeout: float, warm: bool = False
) -> float:
    """One run to its end; its seconds from the start call to the result."""
    started = time.monotonic()
    limit = timedelta(seconds=timeout)
    if variant.startswith("floor"):
        handle = await client.start_workflow(
            PerfFloor.run,
            args=[turns, FLOOR_HEARTBEAT_S if variant == "floor-hb" else 0],
            id=f"floor-{os.urandom(6).hex()}",
            task_queue=target,
            execution_timeout=limit,
        )
        answer = await handle.result()
    else:
        from toren import client as toren_client

        # As in run.py: prior assistant messages start a warm-up near the script's end.
        prior = [{"role": "assistant", "content": "warm-up"}] * max(turns - 2, 0) if warm else []
        run = await toren_client.start_run(
            client, Path(target).name, "go", messages=prior or None, execution_timeout=limit
        )
        answer = (await run.result()).text
    if answer != "done":
        raise RuntimeError(f"{variant} T={turns} answered {answer!r}")
    return time.monotonic() - started


async def cell(
    client: Client,
    address: str,
    variant: str,
    runs: int,
    turns: int,
    target: str,
    logdir: Path,
    timeout: float,
    server_pid: int | None,
    py_spy: Path | None,
    settle: float = 0.0,
    idle_rate: float = 0.0,
    metrics_port: int | None = None,
) -> Cell:
    """Serve one batch of `runs` concurrent runs of `turns` turns from a fresh worker."""
    logdir.mkdir(parents=True)
    with WorkerProcess(address, variant, target, logdir) as w:
        await one_run(client, variant, turns, target, timeout, warm=True)
        pid = w.proc.pid
        spy, profile = None, None
        if py_spy is not None:
            profile = py_spy / f"{logdir.name}.txt"  # variant, N, T and repeat
            spy = subprocess.Popen(
                # `--gil`: only the thread holding the GIL, so idle pool threads do not count.
                [
                    PY_SPY,
                    "record",
                    "--gil",
                    "--pid",
                    str(pid),
                    "--format",
                    "raw",
                    "-o",
                    str(profile),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)  # py-spy attaches before the batch starts
        # The server's counters trail its work by most of a second: wait for the warm-up's.
        ops_before = await settled_counts(metrics_port)
        worker_before, server_before = cpu_seconds(pid) or 0.0, cpu_seconds(server_pid)
        began = time.monotonic()
        outcomes = await asyncio.gather(
            *(one_run(client, variant, turns, target, timeout) for _ in range(runs)),
            return_exceptions=True,
        )
        wall = time.monotonic() - began
        worker_cpu = (cpu_seconds(pid) or 0.0) - worker_before
        rss = memory_kb(pid, "VmHWM")
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes the profile and exits
            spy.wait(60)
        if settle:
            # The worker stays up: a timer that fires finds the run closed and nothing to do.
            await asyncio.sleep(settle)
        server_after = cpu_seconds(server_pid)
        ops = await settled_counts(metrics_port)
        ops.subtract(ops_before)
    server_cpu = None
    if server_before is not None:
        server_cpu = (server_after or 0.0) - server_before - idle_rate * settle
        if server_cpu <= 0:
            print(
                f"  {variant} N={runs} T={turns}: the server's idle CPU over --settle outweighs "
                "the cell's; its server CPU is left out",
                file=sys.stderr,
            )
            server_cpu = None
    times = [o for o in outcomes if isinstance(o, float)]
    for o in outcomes:
        if isinstance(o, BaseException):
            print(f"  {variant} N={runs} T={turns}: failed run: {o!r}", file=sys.stderr)
    cell = Cell(variant, runs, turns, wall, times, runs - len(times), worker_cpu, server_cpu, rss)
    cell.profile = profile
    cell.server_ops = +ops
    print(f"  {report([cell], []).splitlines()[-1]}", file=sys.stderr, flush=True)
    return cell


METRICS_LINE = re.compile(
    r'^(persistence_requests|task_requests)\{(?:.*,)?operation="([^"]+)".*\} ([0-9.e+]+)$'
)


def server_counts(port: int | None) -> collections.Counter[str]:
    """The server's persistence requests and processed queue tasks so far, by operation, from
    its Prometheus metrics: counts of work, where its CPU time moves with the machine."""
    counts: collections.Counter[str] = collections.Counter()
    if port is None:
        return counts
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if match := METRICS_LINE.match(line):
            kind = "persistence" if match[1] == "persistence_requests" else "task"
            counts[f"{kind}:{match[2]}"] += int(float(match[3]))
    return counts


async def settled_counts(port: int | None, wait: float = 8.0) -> collections.Counter[str]:
    """`server_counts` once two reads 1.5 s apart agree (or after `wait` seconds): the
    server publishes its metrics about once a second."""
    counts = server_counts(port)
    deadline = time.monotonic() + wait
    while port is not None and time.monotonic() < deadline:
        await asyncio.sleep(1.5)
        again = server_counts(port)
        if again == counts:
            break
        counts = again
    return counts


async def server_idle_rate(server_pid: int, seconds: float = 20.0) -> float:
    """The server's CPU seconds per second with no run open."""
    before = cpu_seconds(server_pid) or 0.0
    await asyncio.sleep(seconds)
    return ((cpu_seconds(server_pid) or 0.0) - before) / seconds


async def count(client: Client, query: str) -> int:
    """How many workflows visibility counts for `query`."""
    return (await client.count_workflows(query)).count


async def parked(
    client: Client,
    address: str,
    variant: str,
    runs: int,
    target: str,
    logdir: Path,
    timeout: float,
) -> Parked:
    """Park `runs` runs on an approval at once, then approve them all."""
    from toren import client as toren_client

    logdir.mkdir(parents=True)
    queue = "perf-parked-floor" if variant == "floor" else Path(target).name
    prefix = f"parked-{variant}-{os.urandom(4).hex()}"
    limit = timedelta(seconds=timeout)
    gate = asyncio.Semaphore(START_CONCURRENCY)

    async def start(i: int) -> None:
        async with gate:
            if variant == "floor":
                await client.start_workflow(
                    PerfFloorParked.run,
                    id=f"{prefix}-{i}",
                    task_queue=queue,
                    execution_timeout=limit,
                )
            else:
                await toren_client.start_run(
                    client, queue, "go", run_id=f"{prefix}-{i}", execution_timeout=limit
                )

    async def approve(i: int) -> None:
        async with gate:
            handle = client.get_workflow_handle(f"{prefix}-{i}")
            await handle.signal("approve", {"call_id": "call_1_1", "by": "bench"})

    mine = f'WorkflowId STARTS_WITH "{prefix}-"'
    served = queue if variant == "floor" else target
    with WorkerProcess(address, variant, served, logdir) as w:
        rss_idle = memory_kb(w.proc.pid, "VmRSS")
        began = time.monotonic()
        await asyncio.gather(*(start(i) for i in range(runs)))
        waiting = f'{mine} AND ExecutionStatus = "Running" AND TorenStatus = "waiting_approval"'
        started_s = time.monotonic() - began
        while (now := await count(client, waiting)) < runs:
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{variant}: {now} of {runs} runs parked in {timeout:g}s")
            print(f"  parked {variant}: {now}/{runs} parked", file=sys.stderr, flush=True)
            await asyncio.sleep(2.0)
        park_s = time.monotonic() - began
        rss_parked = memory_kb(w.proc.pid, "VmRSS")
        released = datetime.now(UTC)
        await asyncio.gather(*(approve(i) for i in range(runs)))
        while await count(client, f'{mine} AND ExecutionStatus != "Running"') < runs:
            if (datetime.now(UTC) - released).total_seconds() > timeout:
                break
            await asyncio.sleep(0.2)
        rss_peak = memory_kb(w.proc.pid, "VmHWM")
    last, failed = released, 0
    async for execution in client.list_workflows(mine):
        if execution.status != WorkflowExecutionStatus.COMPLETED:
            failed += 1
        if execution.close_time is not None:
            last = max(last, execution.close_time)
    release_s = (last - released).total_seconds()
    result = Parked(
        variant, runs, started_s, park_s, release_s, rss_parked, rss_peak, failed, rss_idle
    )
    print(f"  {report([], [result]).splitlines()[-1]}", file=sys.stderr, flush=True)
    return result


async def bench(
    args: argparse.Namespace, address: str, server_pid: int | None
) -> tuple[list[Cell], list[Parked]]:
    """Every cell, then the parked mode."""
    from toren.connect import connect

    client = await connect(target_host=address)
    root = Path(tempfile.mkdtemp(prefix="toren-perf-conc-"))
    cells, parks = [], []
    idle_rate = 0.0
    if args.settle and server_pid is not None:
        idle_rate = await server_idle_rate(server_pid)
        print(f"  server idle: {idle_rate * 1000:.1f} ms CPU/s", file=sys.stderr, flush=True)
    try:
        agents = {
            (v, t): str(write_agent(root, "toren", t, 0 if v == "toren-nohb" else None))
            for t in args.turns
            for v in args.variants
            if v.startswith("toren")
        }
        for t in args.turns:
            for n in args.runs:
                if args.max_turns and n * t > args.max_turns:
                    print(f"  N={n} T={t}: skipped (over --max-turns)", file=sys.stderr)
                    continue
                for variant, repeat in ((v, r) for r in range(args.repeats) for v in args.variants):
                    target = (
                        f"perf-floor-{t}" if variant.startswith("floor") else agents[(variant, t)]
                    )
                    logdir = root / "logs" / f"{variant}-{n}-{t}-{repeat}"
                    cells.append(
                        await cell(
                            client,
                            address,
                            variant,
                            n,
                            t,
                            target,
                            logdir,
                            args.timeout,
                            server_pid,
                            args.py_spy,
                            args.settle,
                            idle_rate,
                            args.metrics_port,
                        )
                    )
        if args.parked:
            gated = str(write_gated_agent(root))
            # floor-hb and toren-nohb park as floor and toren do: a parked run has no activity
            # running.
            for variant in (v for v in args.variants if v in ("floor", "toren")):
                logdir = root / "logs" / f"parked-{variant}"
                parks.append(
                    await parked(client, address, variant, args.parked, gated, logdir, args.timeout)
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return cells, parks


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` percentile (0 < q <= 1) of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def report(cells: list[Cell], parks: list[Parked]) -> str:
    """The printed tables."""
    lines = [
        f"{'variant':<11}{'N':>5}{'T':>5}{'turns/s':>9}{'worker CPU':>12}{'server CPU':>12}"
        f"{'p50 run':>10}{'p99 run':>10}{'peak RSS':>10}{'failed':>8}{'DB ops':>8}{'tasks':>7}",
        f"{'':<21}{'':>9}{'ms/turn':>12}{'ms/turn':>12}{'s':>10}{'s':>10}{'MB':>10}{'':>8}"
        f"{'/turn':>8}{'/turn':>7}",
    ]
    for c in cells:
        p50 = f"{statistics.median(c.times):.2f}" if c.times else "-"
        p99 = f"{percentile(c.times, 0.99):.2f}" if c.times else "-"
        lines.append(
            f"{c.variant:<11}{c.runs:>5}{c.turns:>5}{c.runs * c.turns / c.wall:>9.1f}"
            f"{c.per_turn_ms(c.worker_cpu):>12}{c.per_turn_ms(c.server_cpu):>12}"
            f"{p50:>10}{p99:>10}{c.rss_kb / 1024:>10.0f}{c.failed:>8}"
            f"{_figure(c.ops_per_turn('persistence')):>8}{_figure(c.ops_per_turn('task')):>7}"
        )
    if parks:
        lines.append("")
        lines.append(
            f"{'parked':<8}{'runs':>6}{'start all':>11}{'park all':>10}{'RSS idle':>10}"
            f"{'RSS parked':>12}{'KB/run':>8}{'peak RSS':>10}{'approve->last done':>20}"
            f"{'failed':>8}"
        )
        for p in parks:
            lines.append(
                f"{p.variant:<8}{p.runs:>6}{p.start_s:>10.1f}s{p.park_s:>9.1f}s"
                f"{p.rss_idle_kb / 1024:>8.0f}MB{p.rss_parked_kb / 1024:>10.0f}MB"
                f"{(p.rss_parked_kb - p.rss_idle_kb) / p.runs:>8.0f}"
                f"{p.rss_peak_kb / 1024:>8.0f}MB"
                f"{p.release_s:>19.2f}s{p.failed:>8}"
            )
    return "\n".join(lines)


def summary(cells: list[Cell]) -> str:
    """Each (N, T, variant)'s medians over its repeats, and their ratios to the floor's."""
    groups: dict[tuple[int, int, str], list[Cell]] = collections.defaultdict(list)
    for c in cells:
        groups[(c.runs, c.turns, c.variant)].append(c)

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    def medians(group: list[Cell]) -> tuple[float, float, float | None]:
        """turns/s, worker and server CPU ms per turn."""
        turns = group[0].runs * group[0].turns
        server = median([c.server_cpu for c in group])
        return (
            statistics.median(turns / c.wall for c in group),
            statistics.median(c.worker_cpu * 1000 / turns for c in group),
            None if server is None else server * 1000 / turns,
        )

    Medians = tuple[float, float, float | None]

    def ratios(mine: Medians, base: Medians | None) -> str:
        if base is None:
            return ""
        server = f"{mine[2] / base[2]:.2f}x" if mine[2] and base[2] else "-"
        return f"{mine[0] / base[0]:.2f}x {mine[1] / base[1]:.2f}x {server}"

    widths = (28, 9, 11, 11, 8, 7, 20)
    header = ("medians over repeats", "turns/s", "worker ms", "server ms", "DB ops", "tasks")
    lines = [
        f"{header[0]:<{widths[0]}}"
        + "".join(f"{h:>{w}}" for h, w in zip(header[1:], widths[1:6], strict=True))
        + f"   {'vs floor (turns/s, worker, server)':<36}vs floor-hb"
    ]
    for (n, t, variant), group in groups.items():
        mine = medians(group)
        bases = [
            medians(groups[(n, t, b)]) if b != variant and (n, t, b) in groups else None
            for b in ("floor", "floor-hb")
        ]
        cols = (
            f"{mine[0]:.1f}",
            f"{mine[1]:.2f}",
            "-" if mine[2] is None else f"{mine[2]:.2f}",
            _figure(median([c.ops_per_turn("persistence") for c in group])),
            _figure(median([c.ops_per_turn("task") for c in group])),
        )
        label = f"{variant} N={n} T={t} x{len(group)}"
        lines.append(
            f"{label:<{widths[0]}}"
            + "".join(f"{v:>{w}}" for v, w in zip(cols, widths[1:6], strict=True))
            + f"   {ratios(mine, bases[0]):<36}{ratios(mine, bases[1])}"
        )
    return "\n".join(lines)


def server_ops_table(cells: list[Cell]) -> str:
    """Per turn, each operation the server counted, one column per variant (first repeat)."""
    first: dict[tuple[int, int, str], Cell] = {}
    for c in cells:
        first.setdefault((c.runs, c.turns, c.variant), c)
    lines = []
    for n, t in dict.fromkeys((k[0], k[1]) for k in first):
        group = [c for (cn, ct, _), c in first.items() if (cn, ct) == (n, t)]
        keys = sorted({k for c in group for k in c.server_ops})
        lines.append(f"server operations per turn, N={n} T={t}")
        lines.append(f"{'':<52}" + "".join(f"{c.variant:>11}" for c in group))
        for key in keys:
            per_turn = [c.server_ops[key] / (c.runs * c.turns) for c in group]
            if max(per_turn) >= 0.05:
                lines.append(f"{key:<52}" + "".join(f"{x:>11.2f}" for x in per_turn))
    return "\n".join(lines)


ROOT_FRAMES = ("<frozen runpy>", "asyncio/", "bench/perf/worker.py", "threading.py", "concurrent/")
"""Modules whose frames sit under nearly every sample (entry point, event loop, thread pool)."""


def top_of_profile(path: Path, limit: int = 15) -> str:
    """The functions a py-spy raw profile spent most in: on their own (self) and with what
    they called (inclusive), line numbers merged, entry-point and event-loop frames left out
    of the inclusive list."""
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, tail = line.rpartition(" ")
        if not stack or not tail.isdigit():
            continue
        samples = int(tail)
        total += samples
        # A frame reads `function (path/to/module.py:line)`; merge a function's lines.
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        own[frames[-1]] += samples
        for frame in set(frames):
            if not any(root in frame for root in ROOT_FRAMES):
                within[frame] += samples
    lines = [f"py-spy profile {path.name}: {total} samples (GIL held)", "  top functions, self:"]
    for name, n in own.most_common(limit):
        lines.append(f"  {100 * n / total:5.1f}%  {name}")
    lines.append("  top functions, inclusive:")
    for name, n in within.most_common(limit):
        lines.append(f"  {100 * n / total:5.1f}%  {name}")
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run the benchmark, print the tables."""
    parser = argparse.ArgumentParser(prog="python -m bench.perf.concurrent", description=__doc__)
    parser.add_argument("--runs", default="1,20,100", help="comma-separated N (runs at once)")
    parser.add_argument("--turns", default="1,10,100", help="comma-separated T (tool turns)")
    parser.add_argument(
        "--max-turns", type=int, default=1000, help="skip cells of more N*T turns; 0: none"
    )
    parser.add_argument("--parked", type=int, default=1000, help="runs parked at once; 0: skip")
    parser.add_argument("--variants", default="floor,toren", help="comma-separated variants")
    parser.add_argument(
        "--server-ops", action="store_true", help="print the server's operations per turn"
    )
    parser.add_argument("--repeats", type=int, default=1, help="batches per cell, interleaved")
    parser.add_argument(
        "--settle",
        type=float,
        default=15,
        help="seconds the server's CPU and operations are counted after a cell",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    parser.add_argument("--py-spy", type=Path, help="directory for py-spy profiles of the workers")
    parser.add_argument("--address", help="an existing Temporal server (default: start one)")
    args = parser.parse_args()
    args.runs = [int(n) for n in args.runs.split(",")]
    args.turns = [int(t) for t in args.turns.split(",")]
    args.variants = [v for v in args.variants.split(",") if v]
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)}; pick from {', '.join(VARIANTS)}")
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    cli = subprocess.run([temporal_cli(), "--version"], capture_output=True, text=True)
    header = (
        f"toren perf, concurrent: temporalio {temporalio.__version__}, {cli.stdout.strip()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    began = time.monotonic()
    args.metrics_port = None
    if args.address:
        cells, parks = asyncio.run(bench(args, args.address, None))
    else:
        with DevServer(ui=False, metrics=True) as server:
            args.metrics_port = server.metrics_port
            pid = server.proc.pid if server.proc else None
            cells, parks = asyncio.run(bench(args, server.address, pid))
    print(header)
    print(report(cells, parks))
    if args.repeats > 1:
        print()
        print(summary(cells))
    if args.server_ops:
        print()
        print(server_ops_table(cells) if args.metrics_port else "(no server operations: --address)")
    for c in cells:
        if c.profile is not None and c.profile.exists():
            print()
            print(top_of_profile(c.profile))
    print(
        f"\n{time.monotonic() - began:.0f}s in all; load at the end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
