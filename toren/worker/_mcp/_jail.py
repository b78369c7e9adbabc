"""Where a stdio MCP server runs: apart from the worker, so it cannot read the worker's secrets.

A stdio server is the worker's child and runs as its user: started plainly, it could read
`/proc/$PPID/environ` (every variable of the worker: other agents' keys, `TEMPORAL_API_KEY`, the
store's AWS keys) and any other process's. So the worker starts it inside bubblewrap:

```python
argv = stdio_argv(["python", "server.py"], cwd)   # ["bwrap", ..., "--", "python", "server.py"]
```

The server sees the host's files as the worker does (its code, its venv, the agent folder) and
the network, but its own pid namespace with a fresh `/proc` (its own processes only, nothing of
the worker's), a minimal `/dev`, its own session, and no capabilities (a root worker's child
cannot remount `/proc` or trace the worker). What it does not hide: files the worker's user can
read (a `.env` file, a Temporal config profile) stay readable to it; every run's redactor knows
the worker's secrets for that (`toren.worker._loaded.worker_secrets`).

Without a working bwrap a stdio server does not start, unless the worker's operator sets
`TOREN_MCP_UNCONFINED=1`: it then runs as a plain child, able to read the worker's environment.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from toren.errors import TorenError
from toren.worker.tools._sandbox._jail import run_probe

__all__ = ["UNCONFINED_VARIABLE", "McpJailError", "stdio_argv"]

UNCONFINED_VARIABLE = "TOREN_MCP_UNCONFINED"
"""Set to `1` on the worker to run stdio MCP servers without bubblewrap (they can read it)."""


class McpJailError(TorenError):
    """A stdio server cannot run apart from the worker here, and the operator did not opt out."""


def stdio_argv(command: Sequence[str], cwd: Path) -> list[str]:
    """The command line that runs a stdio server's `command` in `cwd`, apart from the worker.

    Raises:
        McpJailError: bubblewrap is missing or does not work here, and `TOREN_MCP_UNCONFINED`
            is not `1`.
    """
    if os.environ.get(UNCONFINED_VARIABLE, "").strip() == "1":
        return list(command)
    bwrap = shutil.which("bwrap")
    problem = _probe(bwrap) if bwrap else "bwrap is not installed"
    if bwrap is None or problem is not None:
        raise McpJailError(
            f"a stdio MCP server runs inside bubblewrap, so it cannot read the worker's "
            f"environment, and bubblewrap does not work here ({problem}); install bubblewrap "
            f"(apt-get install bubblewrap), or set {UNCONFINED_VARIABLE}=1 on the worker to "
            "run stdio servers as plain children that can read every variable of the worker"
        )
    return [*_jail(bwrap, cwd), *command]


def _jail(bwrap: str, cwd: Path) -> list[str]:
    return [
        bwrap,
        "--unshare-pid",  # its own processes only: the worker has no pid in its /proc
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",  # the worker (or the session's close) ending it ends the server
        "--new-session",  # no TIOCSTI into the worker's terminal
        # A root worker's child would keep every capability: without them it cannot remount
        # /proc, enter the worker's namespaces, trace it, or read devices.
        "--cap-drop",
        "ALL",
        "--bind",
        "/",
        "/",
        "--dev",  # a minimal /dev: no raw disks or memory of the host
        "/dev",
        "--proc",  # a fresh /proc over the host's: the server's own processes only
        "/proc",
        "--chdir",
        str(cwd),
        "--",
    ]


_WORKS: set[str] = set()
"""The bwrap binaries whose probe passed (a failed probe is tried again at the next start: a
timeout on a loaded host, or a passing shortage of namespaces, must not disable MCP until the
worker restarts)."""


def _probe(bwrap: str) -> str | None:
    """Run `true` as a server would run; return why it failed, or None (once per worker)."""
    if bwrap in _WORKS:
        return None
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    problem = run_probe(lambda tmp: [*_jail(bwrap, tmp), "true"], path)
    if problem is None:
        _WORKS.add(bwrap)
    return problem
