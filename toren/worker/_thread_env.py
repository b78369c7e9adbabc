"""Env values tools set with `ctx.set_env`: text ones in clear, secret ones by reference.

A secret set by a tool must reach later calls and executions of its thread, yet never enter
history in clear. Its value goes into the worker's secret store, a directory of files only
the worker's user can read, and history keeps a random reference (`sec_...`, not a hash: a
hash of a short value could be guessed back). It is `secrets/` in the store every worker of a
task queue shares (`TOREN_STORE`, `toren.store._store`; files mode 0600 in a directory store), or
the older `TOREN_SECRETS`, a directory for these values alone.

```bash
TOREN_STORE=s3://bucket/toren           # secrets under s3://bucket/toren/secrets/
TOREN_SECRETS=/var/lib/toren/secrets    # the older setting; wins when set
```
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from temporalio.exceptions import ApplicationError

from toren.errors import ConfigError
from toren.store._objects import Store
from toren.store._store import DirStore, StoreError, StoreMissing, open_store

if TYPE_CHECKING:
    from toren.agent._tool import Tool
    from toren.worker._loaded import LoadedAgent

__all__ = ["ENV_VAR", "env_types", "seal_env", "secret_store", "thread_env_values"]

ENV_VAR = "TOREN_SECRETS"
_REF = re.compile(r"^sec_[0-9a-f]{32}$")


def secret_store() -> Store:
    """Where the values go: `$TOREN_SECRETS`, else `secrets/` in `TOREN_STORE`."""
    configured = os.environ.get(ENV_VAR, "").strip()
    return DirStore(configured) if configured else open_store().sub("secrets")


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
    ref = "sec_" + secrets.token_hex(16)
    try:
        secret_store().put_bytes(ref, value.encode())
    except StoreError as err:
        # Retryable: the value is in the call's memory only, so the call runs again.
        raise ApplicationError(
            f"storing a set_env secret failed: {err}", type="StoreError"
        ) from None
    return ref


def _load(ref: str, name: str) -> str:
    if not _REF.match(ref):
        raise ConfigError(f"set_env value {name!r} has no valid secret reference ({ref!r})")
    store = secret_store()
    try:
        return store.get_bytes(ref).decode("utf-8")
    except StoreMissing:
        raise ConfigError(
            f"set_env secret {name!r} ({ref}) is not in this worker's store {store.url} (every "
            f"worker of the task queue must use the same TOREN_STORE)"
        ) from None
    except StoreError as err:
        raise ApplicationError(
            f"reading a set_env secret failed: {err}", type="StoreError"
        ) from None
