"""`tests/_ci_skips.py`: with CI=true, a skip for want of something CI installs fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = """
import pytest

def test_sandbox():
    pytest.skip("bubblewrap (`bwrap`) is not installed")

def test_other():
    pytest.skip("TOREN_SKIP_FAULTS=1")
"""


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider"]
        + ["-p", "tests._ci_skips", str(tmp_path / "test_sample.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_outside_ci_skips_are_listed_with_their_reasons(tmp_path: Path) -> None:
    run = _pytest(tmp_path, None)
    assert run.returncode == 0, run.stdout
    assert "SKIPPED" in run.stdout and "bubblewrap (`bwrap`) is not installed" in run.stdout


def test_in_ci_a_skip_for_want_of_what_ci_installs_fails(tmp_path: Path) -> None:
    run = _pytest(tmp_path, "true")
    assert run.returncode == 1, run.stdout
    assert "1 failed, 1 skipped" in run.stdout
    assert "CI=true but this test was skipped" in run.stdout
    assert "bubblewrap (`bwrap`) is not installed" in run.stdout
