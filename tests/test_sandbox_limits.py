"""`sandbox.limits` in real runs: a fork bomb, a memory hog, a disk filler and an endless
printer each end with an error naming the limit, while another run on the same worker completes.

Every test sets small limits first and a watchdog kills any sandbox still alive after 30 s, so
a limit that fails cannot take the machine down.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import fetch_history, result_of
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

LIMITS = {"memoryMB": 256, "cpuSeconds": 3, "processes": 64, "fileSizeMB": 50, "workspaceMB": 100}


def _kill_sandboxes(root: Path) -> None:
    """SIGKILL the process group of every process whose command line names `root`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(root).encode() in cmdline and int(pid) != os.getpid():
                os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


@pytest.fixture
def workspaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "workspaces"
    root.mkdir()
    monkeypatch.setenv("TOREN_WORKSPACES", str(root))
    watchdog = threading.Timer(30, _kill_sandboxes, [root])
    watchdog.start()
    try:
        yield root
    finally:
        watchdog.cancel()
        _kill_sandboxes(root)


async def _run_beside_another(
    client: Client,
    make_agent: Callable[..., Path],
    agent_name: str,
    command: str,
    timeout_s: int = 25,
    limits: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Run `command` through bash with LIMITS while a second agent's run completes."""
    hog = make_agent(
        sandbox={"approval": "never", "limits": {**LIMITS, **(limits or {})}},
        script=[
            {"tool_calls": [{"id": "b", "name": "bash", "args": {"command": command, "timeout_seconds": timeout_s}}]},
            "done",
        ],
    )  # fmt: skip
    other = make_agent(name=f"{agent_name}_other", script=["fine"])
    async with serve(client, [hog, other]):
        handle = await toren_client.start_run(client, hog.name, "go")
        other_handle = await toren_client.start_run(client, other.name, "hello")
        await result_of(other_handle)  # the worker serves others meanwhile
        await result_of(handle)
    events = render(await fetch_history(client, handle.id))
    [done] = [e for e in events if e["type"] == "ToolCallCompleted" and e["callId"] == "b"]
    result: dict[str, Any] = json.loads(done["result"])
    return result


async def test_fork_bomb_hits_the_process_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    result = await _run_beside_another(
        client, make_agent, agent_name, "bomb() { bomb | bomb & }; bomb; sleep 10"
    )
    assert (
        result["error"] == "bash: the command exceeded the sandbox's process limit (processes: 64)"
    )


async def test_memory_hog_hits_the_memory_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    result = await _run_beside_another(
        client, make_agent, agent_name, "python3 -c 'b = bytearray(400 << 20); print(len(b))'"
    )
    assert (
        result["error"] == "bash: the command exceeded the sandbox's memory limit (memoryMB: 256)"
    )
    assert "MemoryError" in result["stderr"]
    assert result["stdout"] == ""


async def test_disk_filler_hits_the_file_size_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    result = await _run_beside_another(
        client, make_agent, agent_name, "head -c 80M /dev/zero > big; ls -l big"
    )
    assert result["error"] == (
        "bash: the command exceeded the sandbox's file size limit (fileSizeMB: 50)"
    )
    [workspace] = [p for p in workspaces.iterdir() if (p / "big").exists()]
    assert (workspace / "big").stat().st_size == 50 << 20


async def test_endless_printer_is_cut_and_ended_by_the_timeout(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    # `yes` spends its time blocked on the pipe, not on CPU: the call's timeout ends it.
    result = await _run_beside_another(client, make_agent, agent_name, "yes toren", timeout_s=5)
    assert result["exit_code"] == 124
    assert "chars cut" in result["stdout"]
    assert len(result["stdout"]) < 20_000


async def test_busy_loop_hits_the_cpu_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    result = await _run_beside_another(
        client, make_agent, agent_name, "python3 -c 'while True: pass'"
    )
    assert (
        result["error"] == "bash: the command exceeded the sandbox's CPU time limit (cpuSeconds: 3)"
    )
    assert result["exit_code"] == 152  # SIGXCPU, long before the 25 s timeout


# Touches a page at a time, the way the attack in issue 30 did, and says when it got through.
_TOUCH = "for i in range(0, 400 << 20, 4096): m[i] = 1\nprint('touched 400 MB')"


async def test_shared_anonymous_mapping_hits_the_memory_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    # RLIMIT_DATA counts private mappings only: a shared one used to run to the end.
    script = f"import mmap\nm = mmap.mmap(-1, 400 << 20)\n{_TOUCH}"
    result = await _run_beside_another(
        client, make_agent, agent_name, f'python3 -c "{script}"', limits={"memoryMB": 64}
    )
    assert result["error"] == "bash: the command exceeded the sandbox's memory limit (memoryMB: 64)"
    assert "touched" not in result["stdout"]


async def test_mapped_file_in_dev_shm_hits_the_memory_limit(
    client: Client, make_agent: Callable[..., Path], agent_name: str, workspaces: Path
) -> None:
    script = (
        "import mmap, os\nfd = os.open('/dev/shm/big', os.O_RDWR | os.O_CREAT)\n"
        f"os.ftruncate(fd, 400 << 20)\nm = mmap.mmap(fd, 400 << 20)\n{_TOUCH}"
    )
    # A file size limit above the file's: only memory may stop it.
    limits = {"memoryMB": 64, "fileSizeMB": 512}
    result = await _run_beside_another(
        client, make_agent, agent_name, f'python3 -c "{script}"', limits=limits
    )
    assert result["error"] == "bash: the command exceeded the sandbox's memory limit (memoryMB: 64)"
    assert "touched" not in result["stdout"]


async def test_a_sparse_file_counts_whole_and_never_reaches_the_store(
    client: Client,
    make_agent: Callable[..., Path],
    workspaces: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = tmp_path / "store"
    monkeypatch.setenv("TOREN_STORE", str(store))
    folder = make_agent(
        sandbox={"approval": "never", "limits": {"workspaceMB": 10}},
        script=[
            {"tool_calls": [{"id": "k", "name": "write_file", "args": {"path": "keep.txt", "content": "kept\n"}}]},
            {"tool_calls": [{"id": "b", "name": "bash", "args": {"command": "truncate -s 200M sparse.bin; du -k sparse.bin"}}]},
            {"tool_calls": [{"id": "l", "name": "bash", "args": {"command": "ls"}}]},
            "done",
        ],
    )  # fmt: skip
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await result_of(handle)
    events = render(await fetch_history(client, handle.id))
    done = {e["callId"]: e for e in events if e["type"] == "ToolCallCompleted"}
    assert "(workspaceMB: 10)" in done["b"]["result"]
    assert "over the sandbox's workspace size limit (workspaceMB: 10)" in done["b"]["result"]
    assert "were not stored and were rolled back" in done["b"]["result"]
    # The next call starts from the version before: the sparse file is gone, the rest is kept.
    listing = json.loads(done["l"]["result"])["stdout"].split()
    assert listing == ["keep.txt"]
    stored = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    assert stored < 10 << 20, f"the store holds {stored:,} bytes for a 10 MB workspace"
