"""Where a parked run's memory goes: toren against the bare floor, in one worker process.

```bash
.venv/bin/python -m bench.perf.parked_memory                      # K=300, floor and toren
.venv/bin/python -m bench.perf.parked_memory --runs 500 --variants toren
.venv/bin/python -m bench.perf.parked_memory --trace 6            # + tracemalloc, 6 frames
```

Flags: `--runs K` (runs parked per step; default 300), `--variants` (from `floor` and
`toren`), `--trace FRAMES` (tracemalloc with this many frames per traceback; 0, the default,
leaves it off: it costs memory and time of its own), `--top N` (rows per table; default 15),
`--address` (an existing Temporal server instead of a dev server started here).

Each variant runs in its own process (`--variant` re-executes this module), which is both the
worker and the client: `floor` serves `PerfFloorParked` (bench/perf/floor.py) on a client and
worker of Temporal's alone (as bench/perf/worker.py does), `toren` the gated agent of
`bench.perf.concurrent` (one call to a tool with `approval="always"`). The process parks 20
warm-up runs, then K runs, measures, parks K more and measures again; every figure is the
difference between the two measurements over K, so what a worker pays once (imports, caches,
the first runs) drops out. A run counts as parked once visibility sees its
`TorenStatus="waiting_approval"`; each measurement waits a second more, then collects garbage.
The process is also the client that starts the runs: its figures include what the client
keeps per start call (~1 KB, heaptrack), which a separate worker would not.

Printed per variant, all per parked run:

- `RSS`: the process's resident set (VmRSS).
- `pymalloc`: bytes in pymalloc's allocated blocks (Python objects of up to 512 bytes), from
  `sys._debugmallocstats` (which leaves them out while tracemalloc runs: `-` with `--trace`).
- `malloc`: glibc's bytes in use (`mallinfo2`: `uordblks + hblkhd`): larger Python objects,
  and everything native (the protobuf arenas of upb, the SDK core's Rust heap).
- `blocks`: `sys.getallocatedblocks()`.
- the gc-tracked objects per run by type (`gc.get_objects()`; strings, bytes and numbers are
  not tracked, so they show only under tracemalloc);
- with `--trace`, tracemalloc's growth per run by traceback (its innermost frames), Python
  allocations only (not upb's or the core's).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench.perf.concurrent import write_gated_agent
from bench.perf.floor import PerfFloorParked, model, tool
from toren.testing import DevServer

__all__ = ["main"]

WARM_UP = 20
"""Runs parked before the first measurement (first-run costs stay out of the figures)."""
SETTLE_S = 1.0
"""Seconds to wait after visibility counts every run parked, before measuring."""
START_CONCURRENCY = 50


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def malloc_in_use() -> int:
    """glibc's bytes in use (heap and mmapped chunks); 0 where `mallinfo2` is missing."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return 0
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def pymalloc_in_use() -> int:
    """Bytes in pymalloc's allocated blocks (`sys._debugmallocstats` writes them to fd 2)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else 0


def rss_bytes() -> int:
    """The process's VmRSS."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class Sample:
    """One measurement of the process."""

    rss: int
    pymalloc: int
    malloc: int
    blocks: int
    types: collections.Counter[str]
    snapshot: tracemalloc.Snapshot | None = field(default=None, repr=False)


def sample() -> Sample:
    """Collect garbage, then measure."""
    gc.collect()
    types = collections.Counter(
        f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects()
    )
    snapshot = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    return Sample(
        rss_bytes(), pymalloc_in_use(), malloc_in_use(), sys.getallocatedblocks(), types, snapshot
    )


@contextlib.asynccontextmanager
async def serving(client: Client, variant: str, root: Path) -> AsyncIterator[str]:
    """A worker of `variant` in this process; yields its task queue."""
    if variant == "floor":
        queue = "parked-memory-floor"
        async with Worker(
            client, task_queue=queue, workflows=[PerfFloorParked], activities=[model, tool]
        ):
            yield queue
        return
    from toren.worker import serve

    folder = write_gated_agent(root)
    async with serve(client, [folder]):
        yield folder.name


async def park(client: Client, variant: str, queue: str, ids: list[str]) -> None:
    """Start a run per id and wait until visibility counts all of them parked."""
    from toren import client as toren_client

    gate = asyncio.Semaphore(START_CONCURRENCY)
    limit = timedelta(minutes=30)

    async def start(run_id: str) -> None:
        async with gate:
            if variant == "floor":
                await client.start_workflow(
                    PerfFloorParked.run, id=run_id, task_queue=queue, execution_timeout=limit
                )
            else:
                await toren_client.start_run(
                    client, queue, "go", run_id=run_id, execution_timeout=limit
                )

    await asyncio.gather(*(start(i) for i in ids))
    prefix = ids[0].rsplit("-", 1)[0]
    query = (
        f'WorkflowId STARTS_WITH "{prefix}-" AND ExecutionStatus = "Running" '
        'AND TorenStatus = "waiting_approval"'
    )
    began = time.monotonic()
    while (await client.count_workflows(query)).count < len(ids):
        if time.monotonic() - began > 600:
            raise RuntimeError(f"{variant}: runs not parked after 600 s")
        await asyncio.sleep(0.5)
    await asyncio.sleep(SETTLE_S)


def per_run(label: str, before: int, after: int, runs: int) -> str:
    """One figure's growth per run, as printed (`-` when it could not be read)."""
    if not before or not after:
        return f"{label}=-"
    return f"{label}={(after - before) / runs / 1024:.1f}KB"


def type_table(a: Sample, b: Sample, runs: int, top: int) -> list[str]:
    """The gc-tracked types that grew most, per run."""
    diff = b.types.copy()
    diff.subtract(a.types)
    total = sum(diff.values()) / runs
    rows = [f"  gc objects/run: {total:.1f}"]
    for name, n in sorted(diff.items(), key=lambda kv: -kv[1])[:top]:
        rows.append(f"    {n / runs:7.2f}  {name}")
    return rows


def trace_table(a: Sample, b: Sample, runs: int, top: int) -> list[str]:
    """tracemalloc's growth per run by traceback, largest first."""
    assert a.snapshot is not None and b.snapshot is not None
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = b.snapshot.filter_traces(filters).compare_to(
        a.snapshot.filter_traces(filters), "traceback"
    )
    total = sum(s.size_diff for s in stats) / runs
    rows = [f"  tracemalloc/run: {total / 1024:.1f}KB"]
    for stat in stats[:top]:
        rows.append(f"    {stat.size_diff / runs:8.0f} B {stat.count_diff / runs:6.2f} blocks")
        for frame in reversed(stat.traceback):
            short = "/".join(Path(frame.filename).parts[-2:])
            rows.append(f"        {short}:{frame.lineno}")
    return rows


async def one_variant(args: argparse.Namespace) -> None:
    """Measure one variant in this process; print its lines."""
    from toren.connect import connect

    variant, runs = args.variant, args.runs
    # The floor's client is Temporal's own: toren's would bring toren's plugin to its worker.
    if variant == "floor":
        client = await Client.connect(args.address)
    else:
        client = await connect(target_host=args.address)
    tag = os.urandom(3).hex()
    with tempfile.TemporaryDirectory(prefix="toren-parked-memory-") as tmp:
        os.chdir(tmp)  # the worker's `.toren` store goes here
        async with serving(client, variant, Path(tmp)) as queue:
            await park(client, variant, queue, [f"pm-{tag}-w-{i}" for i in range(WARM_UP)])
            if args.trace:
                tracemalloc.start(args.trace)
            await park(client, variant, queue, [f"pm-{tag}-a-{i}" for i in range(runs)])
            first = sample()
            await park(client, variant, queue, [f"pm-{tag}-b-{i}" for i in range(runs)])
            second = sample()
            tracemalloc.stop()
            if args.exit_parked:
                print_figures(args, first, second)
                os._exit(0)
    print_figures(args, first, second)


def print_figures(args: argparse.Namespace, first: Sample, second: Sample) -> None:
    """Print the growth per run between the two samples."""
    variant, runs = args.variant, args.runs
    figures = [
        per_run("RSS", first.rss, second.rss, runs),
        per_run("pymalloc", first.pymalloc, second.pymalloc, runs),
        per_run("malloc", first.malloc, second.malloc, runs),
        f"blocks={(second.blocks - first.blocks) / runs:.0f}",
    ]
    lines = [f"{variant} K={runs}: " + " ".join(figures)]
    lines += type_table(first, second, runs, args.top)
    if args.trace:
        lines += trace_table(first, second, runs, args.top)
    print("\n".join(lines), flush=True)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs parked per step")
    parser.add_argument("--variants", default="floor,toren")
    parser.add_argument("--trace", type=int, default=0, help="tracemalloc frames; 0: off")
    parser.add_argument("--top", type=int, default=15, help="rows per table")
    parser.add_argument("--address", help="an existing Temporal server")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in this process
    parser.add_argument(
        "--exit-parked",
        action="store_true",
        help="with --variant: exit with the runs still parked, so a heap profiler "
        "(heaptrack) reports what they hold as leaked",
    )
    args = parser.parse_args()
    if args.variant:
        asyncio.run(one_variant(args))
        # Skip the interpreter's finalization: the SDK's native threads can still be calling into
        # Python then, which now and then aborts the process (`PyGILState_Release: thread state
        # must be current`) after every figure was printed, and fails the whole invocation.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    with contextlib.ExitStack() as stack:
        address = args.address
        if address is None:
            server = stack.enter_context(DevServer(ui=False))
            address = server.address
        for variant in args.variants.split(","):
            command = [
                sys.executable, "-m", "bench.perf.parked_memory", "--variant", variant,
                "--runs", str(args.runs), "--trace", str(args.trace), "--top", str(args.top),
                "--address", address,
            ]  # fmt: skip
            subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
