"""What a workspace that follows its run costs per sandbox call: snapshot (`commit`) and restore
(`prepare`) times and bytes, on a DirStore and on S3 (a local moto server).

```bash
.venv/bin/python -m bench.perf.workspace          # dir and s3; 1 MB and 200 MB; 3 repeats
.venv/bin/python -m bench.perf.workspace --store dir --sizes 1,200 --repeats 5
```

Workspaces (`--sizes`, in MB; random bytes, so nothing compresses or dedupes):

- 1 MB: 50 files of 20 KB in 5 folders.
- 200 MB: 400 files of 50 KB in 20 folders (20 MB) plus 3 files of 60 MB (180 MB).

A "call" rewrites ONE small file (20 KB or 50 KB, new random content, same size) and then
commits at once, as the sandbox activity does; each call changes a different file. Between
calls the script sleeps `--gap` seconds, untimed (the model's turn; default 0.1 s, twice
`RACY_NS`: with no gap every file written in the last 50 ms is hashed again). Steps, each
measured `--repeats` times (median reported) after one warm-up call; the first round also
hashes again what the warm-up wrote (the stale host's full restore, the warm-up call's file),
so take 3 repeats or more:

- `first commit (all new)`: the first version, every blob uploaded (measured once, not
  repeated).
- `prepare, same host`: the host already has the version and left it clean: the no-change
  `prepare` (time in µs, through `await`, i.e. including `asyncio.to_thread`): it reads the
  version from the head of the host's state file and compares it with the one asked for. The
  next row, an `await asyncio.to_thread` of a no-op under the same conditions (after the same
  idle gap), is how much of that is handing the call to a thread and back. Then the same
  `prepare` 100 times in a row (each after an untimed `release`), warm: the median of those.
- `commit, one file changed`: the snapshot after a call: a walk, hashing of what changed,
  upload of blobs the store lacks (a HEAD each on S3), the manifest. `hashed` counts every
  file read to hash it: the changed file, and any file the host's *previous* walk saw change
  within `RACY_NS` (50 ms) before it began, hashed once more (`toren.store._workspace.RACY_NS`).
  Here the previous walk is the no-change commit below, so that is nothing; had the previous
  walk been the previous call's commit, its file would be hashed again here instead.
  `stored` is the blob bytes uploaded (the manifest, a few KB, is not counted).
- `commit, nothing changed`: the next call writes nothing and commits: a walk and stats, plus
  the racy re-hash of the file the call before it changed.
- `commit, nothing changed again`: the next one: a walk and stats only.
- `prepare, fresh host`: a new, empty cache directory on the same store restores the latest
  version: every file downloaded (and hashed once to check it against its name; those bytes
  are not in `hashed`, which counts only walks).
- `commit after fresh restore`: that host's first call (one file changed): files restored
  within `RACY_NS` of the end of the restore are re-hashed.
- `prepare, stale host`: a host whose copy is one version behind (it last ran a read-only
  call, `prepare` + `release`, at the version before the latest; another host ran the last
  call): a walk of its copy, the manifest, and the one changed file. `hashed` is the file its
  own previous restore wrote (racy at this walk).
- `commit after stale restore`: that host's next call (one file changed): the changed file
  and the one just restored.

The fresh and stale hosts' calls are side branches; host A's calls are the run's line.

Times are wall clock in this process on a loaded 2-core machine; the page cache is warm (the
files were just written), so disk reads cost little. The S3 figures are against moto's
standalone server on loopback (one Python process on the same cores, in-memory objects): they
show the number of requests (a HEAD per new blob, an upload per new blob, a download per file
restored, each through boto3's transfer manager, `toren.store._workspace.TRANSFERS` = 8 at a time)
more than a real S3's latency or bandwidth. Each store/size gets its own store (a temp directory or
a bucket prefix), so every blob of the first version is new to it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toren.store._objects import Store
from toren.store._s3 import S3Store
from toren.store._store import DirStore
from toren.store._workspace import Stats, Workspaces
from toren.testing import moto_s3

RUN = "bench-run"
KB, MB = 1024, 1024 * 1024
BUCKET = "toren-bench"
BACK_TO_BACK = 100


def layout(size_mb: int) -> list[tuple[str, int]]:
    """(relative path, size) of every file of a workspace of about `size_mb` MB."""
    if size_mb <= 1:
        return [(f"d{i % 5}/f{i:03d}.bin", 20 * KB) for i in range(50 * size_mb or 50)]
    small = [(f"d{i % 20:02d}/f{i:03d}.bin", 50 * KB) for i in range(400)]
    big_total = size_mb * MB - 400 * 50 * KB
    big = [(f"data/big{i}.bin", big_total // 3) for i in range(3)]
    return small + big


def describe(size_mb: int) -> str:
    files = layout(size_mb)
    sizes: dict[int, int] = {}
    for _, size in files:
        sizes[size] = sizes.get(size, 0) + 1
    parts = [f"{n} x {_human(s)}" for s, n in sorted(sizes.items())]
    return f"{_human(sum(s for _, s in files))}: " + " + ".join(parts)


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 * MB)
            f.write(os.urandom(n))
            left -= n


@dataclass
class Sample:
    seconds: float
    stats: Stats


class Rows:
    """Samples per (store, size, step), in the order first seen."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str, str], list[Sample]] = {}

    def add(self, store: str, size: str, step: str, seconds: float, stats: Stats) -> None:
        copy = Stats(stats.hashed_bytes, stats.uploaded_bytes, stats.downloaded_bytes, stats.files)
        self.data.setdefault((store, size, step), []).append(Sample(seconds, copy))

    def print(self) -> None:
        print("| store | size | step | time (median) | hashed | stored | downloaded |")
        print("|---|---|---|--:|--:|--:|--:|")
        for (store, size, step), samples in self.data.items():
            t = statistics.median(s.seconds for s in samples)
            when = f"{t * 1e6:.0f} µs" if t < 0.01 else f"{t * 1e3:.1f} ms"
            if t >= 10:
                when = f"{t:.1f} s"
            hashed = statistics.median(s.stats.hashed_bytes for s in samples)
            up = statistics.median(s.stats.uploaded_bytes for s in samples)
            down = statistics.median(s.stats.downloaded_bytes for s in samples)
            print(
                f"| {store} | {size} | {step} | {when} | {_human(hashed)} | {_human(up)} "
                f"| {_human(down)} |"
            )


def _human(n: float) -> str:
    if n == 0:
        return "0"
    if n < MB:
        return f"{n / KB:.0f} KB"
    return f"{n / MB:.1f} MB"


async def bench_case(
    rows: Rows, store_name: str, store: Store, size_mb: int, args: argparse.Namespace, tmp: Path
) -> None:
    """One store and size: the first version, a warm-up call, then `args.repeats` rounds."""
    repeats, gap = args.repeats, args.gap
    label = f"{size_mb} MB"
    host_a = Workspaces(tmp / "host-a", store)
    host_b = Workspaces(tmp / "host-b", store)  # the stale host
    files = layout(size_mb)
    sizes = dict(files)
    turn = iterator([p for p, s in files if s <= 50 * KB])

    def change_on(spaces: Workspaces) -> None:
        time.sleep(gap)  # the model's turn between calls; the call then writes at once
        path = next(turn)
        write_random(spaces.path(RUN) / path, sizes[path])

    # The first version: every blob new to the store (measured once, not repeated).
    await host_a.prepare(RUN, None)
    for path, size in files:
        write_random(host_a.path(RUN) / path, size)
    start = time.perf_counter()
    version = await host_a.commit(RUN, None)
    rows.add(store_name, label, "first commit (all new)", time.perf_counter() - start,
             host_a.last)  # fmt: skip

    # Warm-up: host A runs a call; host B, new to the run, restores that version and runs a
    # read-only call (prepare, release).
    await host_a.prepare(RUN, version)
    version, _, _ = await call_prepared(host_a, version, change_on)
    await host_b.prepare(RUN, version)
    await host_b.release(RUN)

    for _ in range(repeats):
        # Host A ran the last call: no-change prepare, one call, then two commits with nothing
        # changed (a call that wrote nothing, committing anyway).
        time.sleep(gap)
        start = time.perf_counter()
        await host_a.prepare(RUN, version)
        rows.add(store_name, label, "prepare, same host", time.perf_counter() - start,
                 host_a.last)  # fmt: skip
        time.sleep(gap)
        start = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        rows.add(store_name, label, "(for scale: await to_thread(no-op))",
                 time.perf_counter() - start, Stats())  # fmt: skip
        for _ in range(BACK_TO_BACK):
            await host_a.release(RUN)
            start = time.perf_counter()
            await host_a.prepare(RUN, version)
            rows.add(store_name, label, f"prepare, same host, {BACK_TO_BACK} back to back",
                     time.perf_counter() - start, host_a.last)  # fmt: skip
        before = version
        version, seconds, stats = await call_prepared(host_a, version, change_on)
        rows.add(store_name, label, "commit, one file changed", seconds, stats)
        for step in ("commit, nothing changed", "commit, nothing changed again"):
            time.sleep(gap)
            await host_a.prepare(RUN, version)
            start = time.perf_counter()
            unchanged = await host_a.commit(RUN, version)
            rows.add(store_name, label, step, time.perf_counter() - start, host_a.last)
            assert unchanged == version

        # A fresh host restores the latest version, then runs one call (its result is a side
        # branch, dropped with the host).
        fresh = Workspaces(tmp / "host-fresh", store)
        time.sleep(gap)
        start = time.perf_counter()
        await fresh.prepare(RUN, version)
        rows.add(store_name, label, "prepare, fresh host", time.perf_counter() - start,
                 fresh.last)  # fmt: skip
        _, seconds, stats = await call_prepared(fresh, version, change_on)
        rows.add(store_name, label, "commit after fresh restore", seconds, stats)
        shutil.rmtree(tmp / "host-fresh")

        # Host B holds the version before host A's call: it restores the latest, then runs a
        # call (a side branch too); then, untimed, a read-only call at the latest version, so
        # it is one behind again after host A's next call.
        time.sleep(gap)
        start = time.perf_counter()
        await host_b.prepare(RUN, version)
        rows.add(store_name, label, "prepare, stale host", time.perf_counter() - start,
                 host_b.last)  # fmt: skip
        assert before != version
        _, seconds, stats = await call_prepared(host_b, version, change_on)
        rows.add(store_name, label, "commit after stale restore", seconds, stats)
        time.sleep(gap)
        await host_b.prepare(RUN, version)
        await host_b.release(RUN)
    shutil.rmtree(tmp / "host-a")
    shutil.rmtree(tmp / "host-b")


async def call_prepared(
    spaces: Workspaces, version: str, change_on: Callable[[Workspaces], None]
) -> tuple[str, float, Stats]:
    """The rest of a call on a host already prepared at `version`: one change, the commit."""
    change_on(spaces)
    start = time.perf_counter()
    new = await spaces.commit(RUN, version)
    return new, time.perf_counter() - start, spaces.last


def iterator(paths: list[str]) -> Iterator[str]:
    while True:
        yield from paths


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="dir,s3", help="comma-separated: dir, s3")
    parser.add_argument("--sizes", default="1,200", help="workspace sizes in MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--gap", type=float, default=0.1,
        help="seconds between calls (the model's turn), untimed; default 2 x RACY_NS",
    )  # fmt: skip
    args = parser.parse_args()
    stores = [s.strip() for s in args.store.split(",") if s.strip()]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = Rows()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for store_name in stores:
            store: Store
            if store_name == "dir":
                for size in sizes:
                    store = DirStore(tmp / "store" / f"size{size}")
                    await bench_case(rows, "dir", store, size, args, tmp)
            elif store_name == "s3":
                with moto_s3() as endpoint:
                    os.environ.update(
                        AWS_ENDPOINT_URL=endpoint,
                        AWS_ACCESS_KEY_ID="testing",
                        AWS_SECRET_ACCESS_KEY="testing",
                        AWS_DEFAULT_REGION="us-east-1",
                    )
                    S3Store(BUCKET, "", endpoint).client().create_bucket(Bucket=BUCKET)
                    for size in sizes:
                        store = S3Store(BUCKET, f"size{size}", endpoint)
                        await bench_case(rows, "s3 (moto)", store, size, args, tmp)
            else:
                parser.error(f"unknown store {store_name!r}: use dir or s3")
    print()
    for size in sizes:
        print(f"- {size} MB workspace: {describe(size)}")
    print()
    rows.print()
    print(f"\npython {sys.version.split()[0]}; medians over {args.repeats} repeats")


if __name__ == "__main__":
    asyncio.run(main())
