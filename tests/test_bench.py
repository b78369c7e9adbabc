"""The benchmark scripts still run: tiny invocations, checked for their tables, never their figures.

The figures are for a person on a quiet machine (README, Performance); what a test can hold them
to is that every variant ran, every run finished, and every table came out. An SDK upgrade or a
change of toren's that broke a script would otherwise go unseen until someone next measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from toren.testing import DevServer

ROOT = Path(__file__).resolve().parent.parent


def bench(module: str, *args: str, timeout: float = 300) -> str:
    """Run `python -m module args` from the repo's root; return its output, failing on exit."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{module} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_concurrent_bench_runs_every_variant_and_prints_every_table(
    dev_server: DevServer,
) -> None:
    # On the session's server: with a server of its own, waiting for the server's metrics to
    # settle around each cell takes a minute (its metrics are read by the next test).
    out = bench(
        "bench.perf.concurrent",
        *("--runs", "2", "--turns", "1", "--parked", "3", "--variants", "floor,toren"),
        *("--repeats", "2", "--settle", "0", "--address", dev_server.address),
    )
    cells = re.findall(r"^(floor|toren)\s+2\s+1\s+(\S+(?:\s+\S+){8})$", out, re.MULTILINE)
    assert sorted(variant for variant, _ in cells) == ["floor", "floor", "toren", "toren"], out
    for _, figures in cells:
        turns_per_s, *_, failed, _, _ = figures.split()
        assert float(turns_per_s) > 0 and failed == "0", out
    parked = re.findall(r"^(floor|toren)\s+3\s+.*\s(\d+)$", out, re.MULTILINE)
    assert parked == [("floor", "0"), ("toren", "0")], out  # all parked, released, none failed
    assert re.search(r"^toren N=2 T=1 x2 .* [0-9.]+x [0-9.]+x", out, re.MULTILINE), out  # summary


def test_the_bench_reads_the_servers_work_from_its_metrics() -> None:
    # What `DB ops`, `tasks` and `--server-ops` are made of: a server that has started keeps
    # its namespaces, shards and queues, so it has counted persistence requests by then.
    with DevServer(ui=False, metrics=True) as server:
        counts = settled_counts_now(server.metrics_port)
    assert any(key.startswith("persistence:") and n > 0 for key, n in counts.items()), counts


def settled_counts_now(port: int | None) -> dict[str, int]:
    """`server_counts`, read until it counts some work (the server publishes about once a
    second, at first with every count at 0) or for 20 s."""
    from bench.perf.concurrent import server_counts

    deadline = time.monotonic() + 20
    while True:
        counts = server_counts(port)
        if any(counts.values()) or time.monotonic() > deadline:
            return dict(counts)
        time.sleep(0.5)


def test_the_parked_memory_bench_measures_both_variants() -> None:
    out = bench("bench.perf.parked_memory", "--runs", "3", "--top", "3")
    for variant in ("floor", "toren"):
        line = re.search(rf"^{variant} K=3: RSS=\S+ pymalloc=(\S+)KB malloc=(\S+)KB", out, re.M)
        assert line, out
    assert out.count("gc objects/run") == 2, out


def test_the_readers_bench_prints_a_row_per_reader_count(dev_server: DevServer) -> None:
    out = bench(
        "bench.perf.readers",
        *("--readers", "0,2", "--decisions", "1", "--watch", "0", "--address", dev_server.address),
    )
    rows = re.findall(r"^\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s+\d+\s+[+-]\d+$", out, re.MULTILINE)
    assert rows == [("0", "0"), ("2", "0")], out  # every reader count ran, nothing refused


def test_the_providers_bench_prints_a_row_per_path() -> None:
    out = bench("bench.perf.providers", "--calls", "3")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [" ".join(r[: len(r) - 4]) for r in rows] == [
        "chat", "chat streamed", "responses", "responses streamed", "anthropic",
        "anthropic streamed", "gemini", "gemini streamed", "bedrock",
    ]  # fmt: skip
    assert all(r[-4] == "3" for r in rows)
