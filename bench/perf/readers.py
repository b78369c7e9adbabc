"""What watching a run costs the people acting on it: decide latency and history events against
the number of stream readers.

```bash
.venv/bin/python -m bench.perf.readers                          # 0, 1, 10, 50, 200 readers
.venv/bin/python -m bench.perf.readers --readers 1,10 --decisions 2 --processes 2
```

For each reader count N, a run parks on a tool that needs approval; N `toren.client.stream`
readers in `--processes` processes watch it (each process's readers share one reader of the
run, as the SSE clients of one `toren serve` do; with `--separate`, each reader has its own
connection, so nothing is shared: the worst case, N `toren run` in N terminals). Once every
reader has read the run's first items, the run's calls are decided one by one through the
`decide` update while they watch. Reported: each decision's round trip (median and worst),
decisions refused (or still waiting after `--give-up` seconds; the `approve` signal then
decides it), and the run's history events, against the run nobody watched.

It starts its own dev server (SQLite in a temp dir, free ports) unless given `--address`, and a
worker in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from toren import client as toren_client
from toren.connect import connect
from toren.testing import FAST_DISPATCH, DevServer
from toren.worker import serve

GATED = textwrap.dedent(
    """
    from toren import define_tool
    tool = define_tool(
        description="Needs a person.",
        input={"type": "object", "properties": {"n": {"type": "integer"}}},
        approval="always",
        handler=lambda a, c: "ran",
    )
    """
)

READERS = textwrap.dedent(
    """
    import asyncio, sys
    from toren import client as toren_client
    from toren.connect import connect

    async def main(run_id, n, separate):
        shared = await connect()

        async def one():
            client = await connect() if separate else shared
            first = True
            async for _ in toren_client.stream(client, run_id):
                if first:
                    print("ready", flush=True)
                    first = False

        await asyncio.gather(*(one() for _ in range(n)))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"))
    """
)


def agent(root: Path, decisions: int) -> Path:
    name = f"bench_readers_{uuid.uuid4().hex[:6]}"
    folder = root / name
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.yaml").write_text(yaml.safe_dump({"name": name, "model": "mock/scripted"}))
    (folder / "instructions.md").write_text("Benchmark agent.")
    (folder / "tools" / "gated.py").write_text(GATED)
    calls: list[Any] = [
        {"tool_calls": [{"id": f"g{i}", "name": "gated", "args": {"n": i}}]}
        for i in range(1, decisions + 1)
    ]
    (folder / "mock_script.yaml").write_text(yaml.safe_dump([*calls, "done"]))
    return folder


async def waiting_for(client: Any, run_id: str, call_id: str) -> None:
    while [c.call_id for c in await toren_client.pending(client, run_id)] != [call_id]:
        await asyncio.sleep(0.05)


async def one_case(
    client: Any, address: str, folder: Path, readers: int, args: argparse.Namespace
) -> tuple[list[float], int, int]:
    """(decide ms each, refused, history events) for a run watched by `readers` readers."""
    handle = await toren_client.start_run(client, folder.name, "go")
    await waiting_for(client, handle.id, "g1")
    procs: list[asyncio.subprocess.Process] = []
    ready = 0

    async def count(proc: asyncio.subprocess.Process) -> None:
        nonlocal ready
        assert proc.stdout is not None
        async for line in proc.stdout:
            ready += line.strip() == b"ready"

    per = [
        readers // args.processes + (i < readers % args.processes) for i in range(args.processes)
    ]
    tasks = []
    try:
        for n in (n for n in per if n):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", READERS, handle.id, str(n), "1" if args.separate else "0",
                env={**os.environ, "TEMPORAL_ADDRESS": address},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(proc)
            tasks.append(asyncio.ensure_future(count(proc)))
        while ready < readers:
            await asyncio.sleep(0.1)
        await asyncio.sleep(args.watch)
        times: list[float] = []
        refused = 0
        for i in range(1, args.decisions + 1):
            await waiting_for(client, handle.id, f"g{i}")
            await asyncio.sleep(args.watch)  # the readers watch the parked run a while
            started = time.monotonic()
            try:
                await asyncio.wait_for(
                    toren_client.approve(client, handle.id, f"g{i}"), args.give_up
                )
            except Exception:  # refused (or still waiting): the signal gets through
                refused += 1
                await handle.signal("approve", {"call_id": f"g{i}", "by": "bench"})
            times.append((time.monotonic() - started) * 1000)
        await handle.result()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        for task in tasks:
            task.cancel()
    events = len((await handle.fetch_history()).events)
    return times, refused, events


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", default="0,1,10,50,200", help="reader counts, comma-separated")
    parser.add_argument("--decisions", type=int, default=3, help="decisions per run")
    parser.add_argument("--processes", type=int, default=2, help="reader processes per run")
    parser.add_argument("--separate", action="store_true", help="a connection per reader")
    parser.add_argument("--watch", type=float, default=1.0, help="s watched before each decision")
    parser.add_argument(
        "--give-up", type=float, default=30.0, help="s after which a decision counts as refused"
    )
    parser.add_argument("--address", help="an existing server (default: start a dev server)")
    args = parser.parse_args()
    counts = [int(n) for n in args.readers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        dev = None
        address = args.address
        if address is None:
            dev = DevServer(Path(tmp) / "server", dynamic_config=FAST_DISPATCH)
            dev.start()
            address = dev.address
        try:
            client = await connect(target_host=address)
            folder = agent(Path(tmp), args.decisions)
            sharing = "a connection each" if args.separate else "shared per process"
            print(
                f"{args.decisions} decisions per run through `decide`, readers in "
                f"{args.processes} processes ({sharing}), watching {args.watch:g} s before each"
            )
            print(f"{'readers':>8}{'decide ms':>11}{'worst ms':>10}{'refused':>9}{'events':>8}"
                  f"{'vs 0':>8}")  # fmt: skip
            base: int | None = None
            async with serve(client, [folder]):
                for readers in counts:
                    times, refused, events = await one_case(client, address, folder, readers, args)
                    base = events if base is None else base
                    print(
                        f"{readers:>8}{statistics.median(times):>11.0f}{max(times):>10.0f}"
                        f"{refused:>9}{events:>8}{events - base:>+8}",
                        flush=True,
                    )
        finally:
            if dev is not None:
                dev.stop()
    print(f"\npython {sys.version.split()[0]}; history events counted over the whole run")


if __name__ == "__main__":
    asyncio.run(main())
