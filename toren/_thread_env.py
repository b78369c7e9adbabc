"""Env values tools set with `ctx.set_env`: text ones in clear, secret ones by reference.

A secret set by a tool must reach later calls and executions of its thread, yet never enter
history in clear. Its value goes into the worker's secret store, a directory of files only
the worker's user can read, and history keeps a random reference (`sec_...`, not a hash: a
hash of a short value could be guessed back). Every worker of a task queue must see the same
directory, as with attachments.

```bash
TOREN_SECRETS=/var/lib/toren/secrets    # default: .toren/secrets in the worker's directory
```
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren._tool import Tool
    from toren.activities._loaded import LoadedAgent

__all__ = ["ENV_VAR", "env_types", "seal_env", "secret_store", "thread_env_values"]

ENV_VAR = "TOREN_SECRETS"
_REF = re.compile(r"^sec_[0-9a-f]{32}$")


def secret_store() -> Path:
    """The directory: `$TOREN_SECRETS`, else `.toren/secrets` in the cwd."""
    configured = os.environ.get(ENV_VAR, "").strip()
    return Path(configured).expanduser() if configured else Path.cwd() / ".toren" / "secrets"


def seal_env(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """`entries` as history may hold them: each secret value replaced by a stored reference."""
    sealed: dict[str, dict[str, Any]] = {}
    for name, entry in entries.items():
        if entry.get("type") == "text":
            sealed[name] = {"type": "text", "value": str(entry["value"])}
        else:
            sealed[name] = {"type": "secret", "ref": _store(str(entry["value"]))}
    return sealed


def thread_env_values(entries: Mapping[str, Mapping[str, Any]] | None) -> dict[str, str]:
    """The values of recorded `set_env` entries, secret ones read back from the store.

    Raises:
        ConfigError: A secret's reference is not in this worker's store (another host's
            directory, or a store that was wiped); the call is retried, perhaps elsewhere.
    """
    values: dict[str, str] = {}
    for name, entry in (entries or {}).items():
        if entry.get("type") == "text":
            values[name] = str(entry.get("value", ""))
        else:
            values[name] = _load(str(entry.get("ref", "")), name)
    return values


def env_types(
    loaded: LoadedAgent, tool: Tool, entries: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Literal["text", "secret"]]:
    """The type of every name a call's `env` holds: declared env, tool variables, set_env."""
    hidden = loaded.secrets()
    types: dict[str, Literal["text", "secret"]] = {
        name: "secret" if name in hidden else "text" for name in loaded.env
    }
    for variable in tool.variables:
        types[variable.name] = variable.type
    for name, entry in (entries or {}).items():
        types[name] = "text" if entry.get("type") == "text" else "secret"
    return types


def _store(value: str) -> str:
    root = secret_store()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    ref = "sec_" + secrets.token_hex(16)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(value)
        os.replace(tmp, root / ref)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ref


def _load(ref: str, name: str) -> str:
    if not _REF.match(ref):
        raise ConfigError(f"set_env value {name!r} has no valid secret reference ({ref!r})")
    path = secret_store() / ref
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"set_env secret {name!r} ({ref}) is not in this worker's secret store {path.parent} "
            f"(set {ENV_VAR} to a directory every worker of the task queue shares)"
        ) from None
