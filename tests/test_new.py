"""`toren new`: the folder it writes passes `toren check` and its own test, as generated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toren.cli._new import scaffold
from toren.errors import UsageError

TOREN = [sys.executable, "-m", "toren.cli"]


def test_a_new_agent_passes_check_and_its_own_test(tmp_path: Path) -> None:
    folder = tmp_path / "agents" / "help-desk"
    made = subprocess.run([*TOREN, "new", str(folder)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "agent.yaml",
        "instructions.md",
        "mock_script.yaml",
        "tests/test_help_desk.py",
        "tools/ticket_status.py",
    ]
    assert "name: help_desk" in (folder / "agent.yaml").read_text()
    checked = subprocess.run(
        [*TOREN, "check", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "tool ticket_status: effects=external idempotency=none approval=predicate" in (
        checked.stdout
    )
    # The generated test as a user runs it: its own dev server, worker and approval.
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "1 passed" in tested.stdout


def test_new_refuses_a_folder_with_files_and_a_name_toren_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not empty"):
        scaffold(tmp_path / "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    with pytest.raises(UsageError, match=r"must match \[a-z\]\[a-z0-9_\]\*.*--name"):
        scaffold(tmp_path / "2fast")
    out = subprocess.run(
        [*TOREN, "new", str(tmp_path / "2fast"), "--name", "Fast"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "'Fast' must match" in out.stderr
    assert not (tmp_path / "2fast").exists()
    assert scaffold(tmp_path / "2fast", "fast")[0] == tmp_path / "2fast" / "agent.yaml"
