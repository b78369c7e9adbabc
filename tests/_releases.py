"""toren's previous release, run beside the current code: its wheel, unzipped onto `PYTHONPATH`.

`tests/fixtures/releases/` holds one wheel, the release before this one (its README says when
to replace it). A subprocess of this venv's python with the unzipped wheel first on
`PYTHONPATH` imports that release: the editable install's finder sits at the end of
`sys.meta_path`, so any `toren` on `sys.path` wins. Standard library only: the history recorder
imports this before it knows which toren it runs.

```python
site = unpack(tmp_path)                     # once per session
subprocess.Popen([sys.executable, "-m", "toren.cli", "worker", folder], env=env_for(site),
                 cwd=tmp_path)              # never the repo root: its toren/ comes first
```
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["RELEASES", "env_for", "previous_version", "previous_wheel", "unpack"]

RELEASES = Path(__file__).parent / "fixtures" / "releases"
"""Where the previous release's wheel lies (committed; CI's checkout may have no git tags)."""


def previous_wheel() -> Path:
    """The one wheel in `RELEASES`."""
    wheels = sorted(RELEASES.glob("toren-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one toren wheel in {RELEASES}, found {len(wheels)}")
    return wheels[0]


def previous_version() -> str:
    """The previous release's version, from its wheel's name (`toren-0.1.0-py3-...`)."""
    return previous_wheel().name.split("-")[1]


def env_for(site: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with `site` first on `PYTHONPATH`."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


def unpack(dest: Path) -> Path:
    """Unzip the previous release into `dest/toren-<version>` and check a subprocess loads it.

    Returns the directory to put first on `PYTHONPATH`.

    Raises:
        RuntimeError: a subprocess given that `PYTHONPATH` imported another toren.
    """
    site = dest / f"toren-{previous_version()}"
    with zipfile.ZipFile(previous_wheel()) as wheel:
        wheel.extractall(site)
    out = subprocess.run(
        [sys.executable, "-c", "import toren; print(toren.__file__)"],
        env=env_for(site),
        cwd=dest,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = Path(out.stdout.strip())
    if not loaded.is_relative_to(site):
        raise RuntimeError(f"PYTHONPATH={site} imported toren from {loaded}, not the wheel")
    return site
