"""Bounding one sandbox call: rlimits set before the command, and a watch while it runs.

```python
argv = [*limits_shim(limits, nproc=True), "/bin/bash", "-c", command]   # inside bwrap
watch = LimitWatch(limits, workspace, proc.pid, jailed=True)
await watch.start()
await watch.until_exceeded_or(exited)           # returns early when a polled limit is passed
error = await watch.finish(exit_code, stderr, "bash")
# "bash: the command exceeded the sandbox's memory limit (memoryMB: 256)" or None
```

Which mechanism holds each limit (`describe` says it for `toren check`):

- memory, CPU, file size: rlimits (`RLIMIT_DATA`, `RLIMIT_CPU`, `RLIMIT_FSIZE`) set by a
  `bash` shim with `ulimit`, soft and hard, inside the sandbox, then `exec` of the command. They
  are per process: N processes may each use the memory limit. cgroup v2 would bound the call as
  a whole, but needs a delegated cgroup with the memory and pids controllers, which a worker
  in a container rarely has; it is not implemented (`describe` says so).
- shared memory: `RLIMIT_DATA` counts only private mappings, so a shared anonymous mapping
  (`mmap.mmap(-1, n)`) or a mapped file in `/dev/shm` or `/tmp` escaped it. The watch reads
  every process of the call every 50 ms and kills the call once one holds more than
  `memoryMB` resident in anonymous and shared memory together (`RssAnon + RssShmem`), so such
  a process may overshoot by what it touches in 50 ms. `/tmp` and `/dev/shm` are tmpfs of
  `memoryMB` each: a mapped file there past that gets SIGBUS, named as the memory limit too.
- processes: `RLIMIT_NPROC`, counted per user per user namespace, so per call in bwrap. The
  kernel never applies it to processes of the host's root, even in a user namespace: a worker
  running as root gets a poll of the sandbox's pid namespace every 50 ms instead, which kills
  the call once the count passes the limit (a fork bomb may overshoot between two polls).
- workspace: the workspace is a bind mount of a host directory, which no rlimit or tmpfs size
  covers, so its size is measured before the call, polled during it (every second or so) and
  measured after; growing past `workspaceMB` kills the call. Between polls a command can write
  about a second's worth of disk bandwidth more (each file at most `fileSizeMB`). A workspace
  already over the cap is not killed for it, so the agent can still delete files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Awaitable
from pathlib import Path

from toren.agent._config import SandboxLimits

__all__ = ["LimitWatch", "describe", "limits_shim", "nproc_enforced"]

CPU_GRACE_S = 5
"""The hard CPU limit is this much above the soft one: SIGXCPU first (reported as such),
SIGKILL if the process ignores it."""
_PROCESS_POLL_S = 0.05
_MEMORY_FIELDS = (b"RssAnon:", b"RssShmem:")
_WORKSPACE_POLL_S = 1.0

# How each limit shows in a shell's stderr or exit status (128 + signal number).
_SIGNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cpuSeconds", re.compile(r"CPU time limit exceeded")),
    ("fileSizeMB", re.compile(r"File size limit exceeded|File too large|\[Errno 27\]")),
    (
        "processes",
        re.compile(
            r"fork: (retry: )?Resource temporarily unavailable|can't start new thread|"
            r"BlockingIOError: \[Errno 11\]"
        ),
    ),
    (
        "memoryMB",
        re.compile(
            r"MemoryError|Cannot allocate memory|memory exhausted|xmalloc: cannot allocate|"
            r"std::bad_alloc|out of memory|(/tmp|/dev/shm)\S*: No space left on device"
        ),
    ),
)
_EXIT_CODES = {
    128 + signal.SIGXCPU: "cpuSeconds",
    128 + signal.SIGXFSZ: "fileSizeMB",
    # A mapped tmpfs file (/tmp, /dev/shm) touched past the tmpfs's size: memoryMB.
    128 + signal.SIGBUS: "memoryMB",
}


def nproc_enforced() -> bool:
    """Whether `RLIMIT_NPROC` holds here: never for the host's root (kernel exemption)."""
    return os.geteuid() != 0


def limits_shim(limits: SandboxLimits, nproc: bool) -> list[str]:
    """The argv prefix that sets `limits` as rlimits, then runs the rest of argv (`exec "$@"`).

    Soft first, then hard: a hard limit below the current soft one is refused. Without
    CAP_SYS_RESOURCE (bwrap drops every capability) the command cannot raise a hard limit.
    """
    data_kb = limits.memory_mb * 1024
    file_kb = limits.file_size_mb * 1024  # bash's -f counts 1024-byte blocks
    cpu = limits.cpu_seconds
    soft = f"-d {data_kb} -f {file_kb} -t {cpu}"
    hard = f"-d {data_kb} -f {file_kb} -t {cpu + CPU_GRACE_S}"
    if nproc:
        soft += f" -u {limits.processes}"
        hard += f" -u {limits.processes}"
    script = f'ulimit -S {soft} && ulimit -H {hard} && exec "$@"'
    return ["/bin/bash", "-c", script, "toren-limits"]


def describe(limits: SandboxLimits, jailed: bool = True) -> str:
    """One line for `toren check`: which mechanism holds each limit on this worker."""
    if not jailed:
        processes = "processes not limited (unconfined: RLIMIT_NPROC would count the worker's user)"
    elif nproc_enforced():
        processes = f"processes {limits.processes} (RLIMIT_NPROC)"
    else:
        processes = (
            f"processes {limits.processes} (polled every 50 ms: the worker runs as root, "
            "which RLIMIT_NPROC exempts)"
        )
    return (
        f"sandbox limits: rlimits per process (memory {limits.memory_mb} MB, cpu "
        f"{limits.cpu_seconds} s, file {limits.file_size_mb} MB); anonymous and shared memory "
        f"resident per process {limits.memory_mb} MB (polled every 50 ms); {processes}; /tmp "
        f"and /dev/shm {limits.memory_mb} MB each; workspace size {limits.workspace_mb} MB "
        "(apparent size, sparse files count whole): polled during and checked after each call, "
        "and never stored past it; cgroup v2: not used"
    )


def workspace_bytes(path: Path) -> int:
    """Bytes under `path` as a stored version would hold them, not following symlinks.

    A regular file counts its apparent size (`st_size`), not the blocks it has on disk: a
    sparse file (`truncate -s 500M`) takes no disk but is stored and restored whole.
    """
    total = 0
    stack = [str(path)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if entry.is_file(follow_symlinks=False):
                        total += max(info.st_size, info.st_blocks * 512)
                    else:
                        total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def _sandbox_processes(outer_pid: int) -> tuple[int, int] | None:
    """`(pid of the sandbox's init, processes in its pid namespace)`, or None if not there yet.

    bwrap (`outer_pid`, in the worker's namespace) forks the sandbox's init into a new pid
    namespace; every process sharing that namespace counts, threads included (as
    RLIMIT_NPROC counts them).
    """
    try:
        children = Path(f"/proc/{outer_pid}/task/{outer_pid}/children").read_text().split()
        init = int(children[0])
        ns = os.readlink(f"/proc/{init}/ns/pid")
    except (OSError, IndexError, ValueError):
        return None
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    count += len(os.listdir(f"/proc/{name}/task"))
    return init, count


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (through each thread's children)."""
    found: list[int] = []
    stack = [pid]
    while stack and len(found) < 100_000:
        current = stack.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError, ValueError):
                    text = Path(f"/proc/{current}/task/{task}/children").read_text()
                    stack.extend(int(child) for child in text.split())
    return found


def _largest_memory(outer_pid: int) -> tuple[int, int]:
    """`(pid, bytes)` of the process below `outer_pid` using the most memory.

    Counted as `RssAnon + RssShmem`: resident anonymous and shared memory (what
    `RLIMIT_DATA` misses is the shared part).
    """
    best = (0, 0)
    for pid in _descendants(outer_pid):
        kb = 0
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(_MEMORY_FIELDS):
                    kb += int(line.split()[1])
        if kb * 1024 > best[1]:
            best = (pid, kb * 1024)
    return best


class LimitWatch:
    """Polls what rlimits cannot bound while a call runs, and names the limit it passed."""

    def __init__(
        self, limits: SandboxLimits | None, workspace: Path, outer_pid: int, jailed: bool
    ) -> None:
        self.limits = limits
        self.workspace = workspace
        self.outer_pid = outer_pid
        self.jailed = jailed
        self.poll_processes = bool(limits) and jailed and not nproc_enforced()
        self.exceeded: str | None = None
        self._start_bytes = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Measure the workspace and begin polling."""
        if self.limits is None:
            return
        self._start_bytes = await asyncio.to_thread(workspace_bytes, self.workspace)
        self._task = asyncio.create_task(self._poll())

    def _cap(self) -> int:
        assert self.limits
        # Already over the cap at the start: only growth counts, so cleanup can run.
        return max(self.limits.workspace_mb << 20, self._start_bytes)

    async def _poll(self) -> None:
        assert self.limits
        next_disk = time.monotonic() + _WORKSPACE_POLL_S
        while True:
            if self.poll_processes:
                found = await asyncio.to_thread(_sandbox_processes, self.outer_pid)
                # +1: bwrap's own init in the namespace is not the command's.
                if found and found[1] > self.limits.processes + 1:
                    self.exceeded = "processes"
                    with contextlib.suppress(OSError):
                        os.kill(found[0], signal.SIGKILL)  # the namespace dies with its init
                    return
            pid, used = await asyncio.to_thread(_largest_memory, self.outer_pid)
            if used > self.limits.memory_mb << 20:
                self.exceeded = "memoryMB"
                # The caller kills the call's process group; in bwrap the pid namespace dies
                # with its init, killed here first so nothing touches another page.
                found = await asyncio.to_thread(_sandbox_processes, self.outer_pid)
                with contextlib.suppress(OSError):
                    os.kill(found[0] if found and self.jailed else pid, signal.SIGKILL)
                return
            if time.monotonic() >= next_disk:
                began = time.monotonic()
                used = await asyncio.to_thread(workspace_bytes, self.workspace)
                if used > self._cap():
                    self.exceeded = "workspaceMB"
                    return
                # A huge tree is walked less often: at most a tenth of the time walking.
                next_disk = time.monotonic() + max(
                    _WORKSPACE_POLL_S, 10 * (time.monotonic() - began)
                )
            await asyncio.sleep(_PROCESS_POLL_S)

    async def until_exceeded_or(self, exited: Awaitable[None]) -> None:
        """Wait for `exited`, or until a polled limit is passed (the caller then kills)."""
        waiter = asyncio.ensure_future(exited)
        if self._task is None:
            await waiter
            return
        try:
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiter.done():
                waiter.cancel()

    def stop(self) -> None:
        """End polling (the call is over or cancelled)."""
        if self._task:
            self._task.cancel()

    async def finish(self, exit_code: int | None, stderr: str, who: str) -> str | None:
        """Stop polling; the error naming the limit the call exceeded, or None."""
        self.stop()
        if self.limits is None:
            return None
        key = self.exceeded
        if key is None and await asyncio.to_thread(workspace_bytes, self.workspace) > self._cap():
            key = "workspaceMB"
        if key is None and exit_code is not None:
            key = _EXIT_CODES.get(exit_code)
        if key is None and exit_code != 0:
            key = next((k for k, sign in _SIGNS if sign.search(stderr)), None)
        if key is None:
            # A failing child whose parent went on (`big_job; echo done`) still shows in stderr.
            key = next((k for k, sign in _SIGNS[:3] if sign.search(stderr)), None)
        if key is None:
            return None
        value = {
            "memoryMB": self.limits.memory_mb,
            "cpuSeconds": self.limits.cpu_seconds,
            "processes": self.limits.processes,
            "fileSizeMB": self.limits.file_size_mb,
            "workspaceMB": self.limits.workspace_mb,
        }[key]
        name = {
            "memoryMB": "memory",
            "cpuSeconds": "CPU time",
            "processes": "process",
            "fileSizeMB": "file size",
            "workspaceMB": "workspace size",
        }[key]
        return f"{who}: the command exceeded the sandbox's {name} limit ({key}: {value})"
