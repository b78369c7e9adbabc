"""Running one bash command: inside bubblewrap, or unconfined when the operator allowed it.

```python
jail = Jail(bwrap=shutil.which("bwrap"), network=False)
result = await jail.run("ls -la", workspace, env={"LANG": "C.UTF-8"}, timeout_s=120)
# {"exit_code": 0, "stdout": "...", "stderr": ""}
```
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toren.agent._config import SandboxLimits
from toren.worker.tools._sandbox._limits import LimitWatch, limits_shim

__all__ = ["KEEP_CHARS", "TIMEOUT_EXIT_CODE", "Capture", "Jail", "bwrap_argv", "probe", "run_probe"]

KEEP_CHARS = 8000
"""Each stream keeps its first and last this many characters; the middle becomes a marker."""
TIMEOUT_EXIT_CODE = 124
"""The exit code reported for a command killed at its timeout (as coreutils `timeout` does)."""
SANDBOX_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
"""PATH inside the sandbox."""

# The system directories bash and common tools need, read-only. Merged-/usr hosts have these as
# symlinks into /usr, which are recreated as symlinks rather than bound.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only the parts of /etc that programs need to run, resolve names and verify TLS. Never all of
# /etc: a worker running as root would expose /etc/shadow and any credentials kept there.
_ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "passwd",
    "pki",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
)
# After bash exits, how long to wait for its output pipes to close before giving up on them.
_DRAIN_S = 2.0
_POLL_S = 0.02


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    network: bool,
    command: str,
    binds: Sequence[tuple[Path, str]] = (),
    limits: SandboxLimits | None = None,
) -> list[str]:
    """The bwrap command line that runs `bash -c command` with `workspace` at /workspace.

    `binds` are extra (host directory, sandbox path) pairs, mounted read-only. With `limits`,
    the rlimits are set before `command` starts, and `/tmp` and `/dev/shm` (tmpfs: host
    memory) are capped at `memory_mb` each.
    """
    # bwrap's --size applies to the next --tmpfs.
    size = ["--size", str(limits.memory_mb << 20)] if limits else []
    argv = [
        bwrap,
        "--unshare-all",  # user, pid, net, ipc, uts, cgroup namespaces
        *(["--share-net"] if network else []),
        "--die-with-parent",  # the worker dying (or killing bwrap) ends the sandbox
        "--new-session",  # no TIOCSTI into the worker's terminal
        # bwrap keeps every capability when the worker runs as root; drop them all, so root
        # inside cannot remount, read via CAP_DAC_OVERRIDE, or create device nodes.
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for name in _ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += [
        "--proc",  # a fresh /proc showing only the sandbox's own processes
        "/proc",
        "--dev",  # a minimal /dev (null, zero, random, tty, shm)
        "/dev",
        # /dev/shm would otherwise be a directory of /dev's tmpfs, unbounded.
        *size,
        "--tmpfs",
        "/dev/shm",
        *size,
        "--tmpfs",
        "/tmp",
    ]
    for source, target in binds:
        argv += ["--ro-bind", str(source), target]
    argv += [
        "--bind",
        str(workspace),
        "/workspace",
        "--chdir",
        "/workspace",
        # Last, after every mount point exists: the sandbox's own root (and so /etc) becomes
        # read-only, leaving only /workspace and /tmp writable.
        "--remount-ro",
        "/",
        "--",
        *(limits_shim(limits, nproc=True) if limits else []),
        "/bin/bash",
        "-c",
        command,
    ]
    return argv


@functools.lru_cache(maxsize=8)
def probe(bwrap: str, network: bool) -> str | None:
    """Run `true` in a sandbox built exactly as bash's will be; return why it failed, or None.

    Cached: one probe per worker process and setting is enough.
    """
    return run_probe(lambda tmp: bwrap_argv(bwrap, tmp, network, "true"), {"PATH": SANDBOX_PATH})


def run_probe(argv: Callable[[Path], list[str]], env: Mapping[str, str]) -> str | None:
    """Run `argv(tmp)` in a fresh temporary folder; return why it failed, or None.

    The one way toren checks, before it relies on bubblewrap, that it works on this host (the
    sandbox's and stdio MCP servers' jails).
    """
    with tempfile.TemporaryDirectory(prefix="toren-bwrap-probe-") as tmp:
        try:
            done = subprocess.run(
                argv(Path(tmp)),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{type(err).__name__}: {err}"
    if done.returncode != 0:
        text = done.stderr.decode("utf-8", "replace").strip()
        return text or f"exit code {done.returncode}"
    return None


class Capture:
    """Decodes a stream incrementally, keeping only its head and tail (bounded memory)."""

    def __init__(self, keep: int = KEEP_CHARS) -> None:
        self.keep = keep
        self.head = ""
        self.tail = ""
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        """Add `data`; pass `final=True` once at the end to flush a split character."""
        text = self._decoder.decode(data, final)
        self.total += len(text)
        if len(self.head) < self.keep:
            room = self.keep - len(self.head)
            self.head += text[:room]
            text = text[room:]
        if text:
            self.tail = (self.tail + text)[-self.keep :]

    def text(self) -> str:
        """The whole stream, or its head and tail around a `… [N chars cut] …` marker."""
        cut = self.total - len(self.head) - len(self.tail)
        if cut <= 0:
            return self.head + self.tail
        return f"{self.head}\n… [{cut} chars cut] …\n{self.tail}"


@dataclass(frozen=True)
class Jail:
    """How bash runs: in bwrap at `bwrap` (its path), or unconfined when `bwrap` is None.

    `limits` bound each call (`SandboxLimits`); `who` names the caller in limit errors.
    """

    bwrap: str | None
    network: bool
    limits: SandboxLimits | None = None
    who: str = "bash"

    async def run(
        self,
        command: str,
        workspace: Path,
        env: Mapping[str, str],
        timeout_s: float,
        binds: Sequence[tuple[Path, str]] = (),
        pass_fds: Sequence[int] = (),
        timeout_note: str = "",
    ) -> dict[str, Any]:
        """Run `command`; return `{exit_code, stdout, stderr}`.

        The process group is killed at `timeout_s` (exit code 124 and a note in stderr) and when
        the caller is cancelled (the activity's timeout or a cancelled run). `binds` mount host
        directories read-only in the sandbox (unconfined, the command sees them where they are);
        `pass_fds` stay open in the command under the same numbers; `timeout_note` replaces
        bash's advice after a timeout. A call that exceeds one of `limits` also gets `error`,
        naming the limit, and a note at the end of stderr.
        """
        if self.bwrap:
            argv = bwrap_argv(self.bwrap, workspace, self.network, command, binds, self.limits)
            # bwrap is started with exactly the sandbox's env, not the worker's: --clearenv
            # would clean only the command's env, while bwrap's own pid-1 process in the
            # sandbox keeps bwrap's environ, readable at /proc/1/environ. Passing values as
            # --setenv would also put them in the world-readable /proc/<pid>/cmdline.
            sandbox_env = {**env, "HOME": "/workspace"}
        else:
            # Unconfined, RLIMIT_NPROC would count every process of the worker's user.
            shim = limits_shim(self.limits, nproc=False) if self.limits else []
            argv = [*shim, "/bin/bash", "-c", command]
            sandbox_env = {**env, "HOME": str(workspace)}
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workspace,
            env=sandbox_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, killed as a whole
            pass_fds=tuple(pass_fds),
        )
        out, err = Capture(), Capture()
        assert proc.stdout and proc.stderr
        pumps = [
            asyncio.create_task(_pump(proc.stdout, out)),
            asyncio.create_task(_pump(proc.stderr, err)),
        ]
        timed_out = False
        watch = LimitWatch(self.limits, workspace, proc.pid, jailed=bool(self.bwrap))
        await watch.start()
        try:
            try:
                await asyncio.wait_for(watch.until_exceeded_or(_exited(proc)), timeout_s)
            except TimeoutError:
                timed_out = True
            # Kill what is left either way: on timeout the command, after a normal exit any
            # background job an unconfined command left holding the pipes (in bwrap the pid
            # namespace already died with its init).
            _kill_group(proc)
            await asyncio.wait(pumps, timeout=_DRAIN_S)
        except asyncio.CancelledError:
            watch.stop()
            _kill_group(proc)
            for task in pumps:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(proc.wait(), 5)
            _close_pipes(proc)
            raise
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _DRAIN_S)
        _close_pipes(proc)
        code = proc.returncode
        stderr = err.text()
        if timed_out:
            code = TIMEOUT_EXIT_CODE
            stderr += "\n[toren] " + (
                timeout_note
                or f"killed after timeout_seconds={timeout_s:g}; run long jobs in the "
                "background with a shorter poll, or raise timeout_seconds (at most 600)"
            )
        elif code is not None and code < 0:
            code = 128 - code  # killed by a signal: report it the way shells do
        result: dict[str, Any] = {"exit_code": code, "stdout": out.text(), "stderr": stderr}
        error = await watch.finish(code, stderr, self.who)
        if error:
            result["stderr"] += f"\n[toren] {error}"
            result["error"] = error
        return result


async def _exited(proc: asyncio.subprocess.Process) -> None:
    # Not proc.wait(): since 3.11.x it also waits for the pipes to close, which a background
    # job holding them open would delay until the timeout. returncode is set on exit itself.
    while proc.returncode is None:
        await asyncio.sleep(_POLL_S)


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    try:
        while chunk := await stream.read(65536):
            capture.feed(chunk)
    finally:
        capture.feed(b"", final=True)


def _close_pipes(proc: asyncio.subprocess.Process) -> None:
    # asyncio closes a child's pipes only when they reach EOF. A drain cut short (a loaded
    # host, or a killed command's descendant that escaped its group still holding them) left
    # them open until garbage collection: a descriptor per call, and a ResourceWarning. The
    # process's transport is the one handle that closes them; asyncio keeps it private.
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
