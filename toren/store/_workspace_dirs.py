"""Where a run's workspace is on a worker: `TOREN_WORKSPACES`, and a safe directory per run.

```python
root = workspace_root(os.environ)          # TOREN_WORKSPACES, default .toren/workspaces
path = workspace_dir(root, "run/1")        # <root>/run_1-<hash>, made 0700 when absent
```
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DEFAULT_ROOT", "workspace_dir", "workspace_name", "workspace_root"]

DEFAULT_ROOT = ".toren/workspaces"
"""Where workspaces live when the worker's env has no `TOREN_WORKSPACES` (under its cwd)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def workspace_root(environ: Mapping[str, str]) -> Path:
    """The absolute directory holding every run's workspace on this worker.

    Args:
        environ: The worker's environment (operator config, not the agent's env).
    """
    raw = environ.get("TOREN_WORKSPACES") or DEFAULT_ROOT
    # realpath, so later realpath'd file paths compare equal to it (e.g. /tmp → /private/tmp).
    return Path(os.path.realpath(Path(raw).expanduser()))


def workspace_name(run_id: str) -> str:
    """A directory name for `run_id`: itself when already safe, else sanitized plus a hash."""
    safe = _UNSAFE.sub("_", run_id).lstrip(".")[:100]
    if safe != run_id or not safe:
        # The hash keeps two ids that sanitize alike (`a/b`, `a_b`) in separate directories.
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
        safe = f"{safe or 'run'}-{digest}"
    return safe


def workspace_dir(root: Path, run_id: str) -> Path:
    """Return the run's workspace under `root`, creating it (kept forever; never deleted here)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / workspace_name(run_id)
    path.mkdir(mode=0o700, exist_ok=True)
    return path
