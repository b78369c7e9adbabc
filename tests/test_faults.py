"""The fault harness in its short mode: real worker kills, a server restart, model failures.

It runs `python -m bench.faults.run --short` as a subprocess (its own dev server on free ports,
its own workers), so it shares nothing with the session's dev server. About two minutes on
2 cores. It runs by default, so CI runs it; TOREN_SKIP_FAULTS=1 leaves it out of a quick local
run (a skipif rather than a custom marker: pyproject registers no markers and the suite turns
warnings, unknown-marker ones included, into errors).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.environ.get("TOREN_SKIP_FAULTS") == "1", reason="TOREN_SKIP_FAULTS=1"
)

BUDGET_S = 240
"""The harness's short mode must finish well inside this (CI runs it on 2 cores)."""


def test_fault_harness_short_mode() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.faults.run", "--short"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUDGET_S + 60,
    )
    took = time.monotonic() - began
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"fault harness failed (exit {proc.returncode}):\n{out[-6000:]}"
    # The table was printed: its header, every scenario, and the closing summary line.
    assert "scenario" in proc.stdout and "verdict" in proc.stdout, out[-3000:]
    for name in (
        "1 worker SIGKILL",
        "2 approval + SIGKILL",
        "3 server restart",
        "4 model failures",
        "5 worker SIGTERM",
        "6 host loss + workspace",
    ):
        assert name in proc.stdout, f"no rows for {name!r}:\n{proc.stdout[-3000:]}"
    assert "0 must-figure(s) off" in proc.stdout, proc.stdout[-3000:]
    assert took < BUDGET_S, f"short mode took {took:.0f}s (budget {BUDGET_S}s)"
