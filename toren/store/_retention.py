"""Retention: delete the store objects of runs closed long enough ago.

```bash
toren store prune --older-than 7            # once (cron, a Kubernetes CronJob)
TOREN_STORE_RETENTION_DAYS=7 toren worker …  # or every worker, once an hour
```

What goes, for each run whose workspace versions are in the store (`versions/<run>/`):

- the run is closed (completed, failed, cancelled, terminated, timed out) and closed more
  than the retention ago, or Temporal no longer knows it (its namespace retention removed it)
  and its newest version is older than that: its versions, and its cache directory on this
  host (`TOREN_WORKSPACES`), are deleted;
- then every blob no remaining version names, written more than an hour ago (a call may be
  storing blobs whose version is not written yet), is deleted.

Attachments and `set_env` secrets are shared by content or by reference across runs and are
kept; large payloads follow the namespace: prune `payloads/` after Temporal's own retention.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from toren.errors import ConfigError
from toren.store._objects import Store
from toren.store._store import StoreMissing, open_store
from toren.store._workspace_dirs import workspace_root

__all__ = ["ENV_VAR", "Pruned", "prune", "retention_days", "run_retention"]

ENV_VAR = "TOREN_STORE_RETENTION_DAYS"
BLOB_GRACE_S = 3600
"""An unnamed blob younger than this may belong to a version being written: kept."""
EVERY_S = 3600
"""How often a worker with `TOREN_STORE_RETENTION_DAYS` prunes."""


@dataclass
class Pruned:
    """What one `prune` deleted."""

    runs: int = 0
    versions: int = 0
    blobs: int = 0
    bytes: int = 0


def retention_days() -> float | None:
    """`TOREN_STORE_RETENTION_DAYS` as a number of days, or None when unset.

    Raises:
        ConfigError: it is set but not a positive number.
    """
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if not days > 0:
        raise ConfigError(f"{ENV_VAR}={raw!r}: give a positive number of days, e.g. 7")
    return days


async def prune(client: Client, older_than_days: float, store: Store | None = None) -> Pruned:
    """Delete the versions of runs closed over `older_than_days` ago, then unnamed blobs."""
    store = store or open_store()
    versions, blobs = store.sub("versions"), store.sub("blobs")
    cutoff = time.time() - older_than_days * 86400
    pruned = Pruned()
    entries = await asyncio.to_thread(lambda: list(versions.list()))
    by_run: dict[str, list[str]] = {}
    newest: dict[str, float] = {}
    for entry in entries:
        folder = entry.key.partition("/")[0]
        by_run.setdefault(folder, []).append(entry.key)
        newest[folder] = max(newest.get(folder, 0.0), entry.mtime)
    kept: list[str] = []
    for folder, keys in sorted(by_run.items()):
        if await _expired(client, versions, folder, newest[folder], cutoff):
            for key in keys:
                await asyncio.to_thread(versions.delete, key)
            pruned.runs += 1
            pruned.versions += sum(1 for k in keys if not k.endswith("/run.json"))
            await asyncio.to_thread(_forget_locally, folder)
        else:
            kept += [k for k in keys if not k.endswith("/run.json")]
    named: set[str] = set()
    for key in kept:
        try:
            doc = json.loads(await asyncio.to_thread(versions.get_bytes, key))
        except StoreMissing:
            continue
        named.update(str(v[0]) for v in doc.get("files", {}).values())
    young = time.time() - BLOB_GRACE_S
    for entry in await asyncio.to_thread(lambda: list(blobs.list())):
        digest = entry.key.rpartition("/")[2]
        if digest not in named and entry.mtime < young:
            await asyncio.to_thread(blobs.delete, entry.key)
            pruned.blobs += 1
            pruned.bytes += entry.size
    return pruned


def _forget_locally(folder: str) -> None:
    """Delete this host's copy of a run's workspace and what it knew of it (.json, .busy)."""
    cache = workspace_root(os.environ)
    shutil.rmtree(cache / folder, ignore_errors=True)
    known = cache.glob(f".{folder}." + "[0-9a-f]" * 8 + ".json")
    for marker in (cache / f".{folder}.busy", *known):
        marker.unlink(missing_ok=True)


async def _expired(
    client: Client, versions: Store, folder: str, newest: float, cutoff: float
) -> bool:
    try:
        run_id = json.loads(await asyncio.to_thread(versions.get_bytes, f"{folder}/run.json"))[
            "run_id"
        ]
    except (StoreMissing, ValueError, KeyError):
        return newest < cutoff  # no name: only its age can tell
    try:
        described = await client.get_workflow_handle(run_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return newest < cutoff  # gone from Temporal (namespace retention)
        raise
    if described.status in (None, WorkflowExecutionStatus.RUNNING):
        return False
    closed = described.close_time.timestamp() if described.close_time else newest
    return closed < cutoff


async def run_retention(client: Client, days: float) -> None:
    """Prune once an hour until cancelled (a worker's background task)."""
    log = logging.getLogger("toren")
    while True:
        try:
            pruned = await prune(client, days)
            if pruned.runs or pruned.blobs:
                log.info(
                    "store retention (%g days): deleted %d run(s), %d version(s), %d blob(s), "
                    "%d bytes", days, pruned.runs, pruned.versions, pruned.blobs, pruned.bytes,
                )  # fmt: skip
        except Exception as err:  # a store or server hiccup: try again next time
            log.warning("store retention failed, trying again in %d s: %s", EVERY_S, err)
        await asyncio.sleep(EVERY_S)
