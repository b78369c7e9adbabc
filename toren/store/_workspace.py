"""Workspaces that follow their run: versions by content hash in the store, the local dir a cache.

A run's workspace lives in the store (`toren.store._store`) as *versions*: manifests whose
files are blobs by content (`toren.store._manifest`); a host's directory is a cache of one.

```python
spaces = Workspaces.from_env()                  # TOREN_WORKSPACES cache + TOREN_STORE
path = await spaces.prepare("run-1", wanted)    # make the local dir match version `wanted`
...                                             # bash runs in `path`
new_id = await spaces.commit("run-1", wanted)   # store what changed; the id of the result
```

A sandbox call's activity does exactly that, and returns the new id in its result: history
names the workspace version after every call, and the next call asks for it. So:

- On the host that ran the last call, with nothing touched since, `prepare` compares one id
  with the one recorded locally (the common case) and does nothing else.
- On a host new to the run, or one whose copy is stale (another host ran later calls), it
  restores from the store: only files whose content differs are downloaded.
- A call retried after its host died starts from the files history says existed before it.
  A `.busy` marker beside the workspace, set by `prepare` and cleared by `commit`, tells a
  host that a call may have died half-way in its copy; it then checks every file.
- `commit` walks the directory, hashes only files whose size, times or inode changed since the
  last walk, uploads blobs the store lacks, and writes the manifest after them: a manifest in
  the store always has its blobs. With no change it writes nothing and returns the same id.

What a host remembers is in `<TOREN_WORKSPACES>/.<run>.json` (the version its copy matches and
each file's stat and digest); deleting it costs one full check, never a wrong file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from toren.errors import SandboxError
from toren.store._manifest import Manifest, blob_key, manifest_key
from toren.store._objects import Store
from toren.store._store import StoreError, StoreMissing, open_store
from toren.store._tree import entries, hash_file
from toren.store._workspace_dirs import workspace_dir, workspace_name, workspace_root

__all__ = ["Stats", "WorkspaceTooLarge", "Workspaces", "download"]

RACY_NS = 50_000_000
"""A file changed this close before a walk is hashed again at the next one: the kernel stamps
files with a coarse clock (a few ms a tick), so a write in the same tick as the walk could
leave its size and times as the walk saw them. A change later than that moves its ctime, which
no program can set back."""

TRANSFERS = 8
"""Blobs uploaded or downloaded at once (each in its own thread)."""
LOCKS = 64
"""Locks a host's workspace steps are spread over (by run)."""
NAMED = 10_000
"""Runs a process remembers having named in the store (`run.json`)."""

_T = TypeVar("_T")
_HEAD = re.compile(rb'\{"version":"([0-9a-f]{64})","walked_ns":[0-9]+,"stats":')
"""The start of a host's state file: the version its copy matches, readable without the rest."""
_Stat = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


class WorkspaceTooLarge(SandboxError):
    """A call left the workspace over its `workspaceMB`: nothing was stored, its copy went back."""


@dataclass
class _Local:
    """What this host knows of its copy of a run's workspace."""

    version: str | None = None
    """The version the copy matched when last left clean."""
    stats: dict[str, list[Any]] = field(default_factory=dict)
    """path → [size, mtime_ns, ctime_ns, inode, sha256] as of the last walk."""
    walked_ns: int = 0


@dataclass
class Stats:
    """What the last `prepare` or `commit` did (for benchmarks and logs)."""

    hashed_bytes: int = 0
    uploaded_bytes: int = 0
    downloaded_bytes: int = 0
    files: int = 0


class Workspaces:
    """Every run's workspace on this host: the local cache `root` and the shared `store`."""

    def __init__(self, root: Path, store: Store) -> None:
        self.root = root
        self.store = store
        self.blobs = store.sub("blobs")
        self.versions = store.sub("versions")
        self.last = Stats()
        self._locks = [threading.Lock() for _ in range(LOCKS)]
        """A run's steps on this host, one at a time: lock `hash(run) % LOCKS` (a fixed set, so
        a worker serving millions of runs holds no lock per run)."""
        self._named: dict[str, None] = {}
        """Runs whose `run.json` (the run id, for retention) this process wrote lately."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Workspaces:
        """The cache `TOREN_WORKSPACES` (default `.toren/workspaces`), the store `TOREN_STORE`."""
        environ = os.environ if environ is None else environ
        return cls(workspace_root(environ), open_store(environ.get("TOREN_STORE") or None))

    def path(self, run_id: str) -> Path:
        """The run's local directory (created when absent)."""
        return workspace_dir(self.root, run_id)

    async def prepare(self, run_id: str, wanted: str | None) -> Path:
        """Make the run's local directory match version `wanted` (None: no version yet).

        Raises:
            StoreError: the store failed or lacks the version; the local copy is left marked
                as unchecked, so the next call checks every file.
        """
        return await asyncio.to_thread(self._locked, run_id, self._prepare, run_id, wanted)

    async def commit(self, run_id: str, base: str | None, limit_bytes: int | None = None) -> str:
        """Store the run's directory as a version (the same id when nothing changed).

        A directory whose files add up to more than `limit_bytes` (apparent sizes: a sparse
        file counts whole, as it would be stored) is not stored: the copy goes back to `base`.

        Raises:
            StoreError: the store failed; no manifest was written, the copy stays unchecked.
            WorkspaceTooLarge: over `limit_bytes`; the copy is version `base` again.
        """
        return await asyncio.to_thread(
            self._locked, run_id, self._commit, run_id, base, limit_bytes
        )

    async def release(self, run_id: str) -> None:
        """End a call that only read the workspace: its copy is still the version prepared."""
        await asyncio.to_thread(self._locked, run_id, self._busy(run_id).unlink, True)

    def _locked(self, run_id: str, fn: Any, *args: Any) -> Any:
        with self._locks[hash(run_id) % LOCKS]:
            return fn(*args)

    # -- the two steps --------------------------------------------------------------------

    def _prepare(self, run_id: str, wanted: str | None) -> Path:
        path = self.path(run_id)
        busy = self._busy(run_id)
        self.last = Stats()
        clean = not busy.exists()
        busy.touch()  # until commit or release: the call may change the copy from here on
        if clean and wanted is not None and self._recorded(run_id) == wanted:
            return path  # the common case: this host's copy is that version, untouched
        local = self._load(run_id)
        if clean and local is not None and local.version == wanted:
            return path  # no version yet, or a state file written with the version later
        if clean and wanted is None and local is None:
            # A run with no version yet, new here: its directory is empty (or predates
            # versions, and is left as it was). Without `clean`, the run's first call died
            # here half-way: what it wrote goes, like any half-done call's.
            return path
        target = Manifest() if wanted is None else self.manifest(run_id, wanted)
        stats, walked = self._restore(path, target, local)
        self._save(run_id, _Local(wanted, stats, walked))
        return path

    def _commit(self, run_id: str, base: str | None, limit_bytes: int | None = None) -> str:
        path = self.path(run_id)
        local = self._load(run_id) or _Local()
        self.last = Stats()
        walked = time.time_ns()
        manifest, stats = self._walk(path, local)
        if limit_bytes is not None and manifest.bytes() > limit_bytes:
            # Never in the store past the limit, whatever the watch during the call saw: roll
            # the copy back to the version the call started from (history still names it).
            target = Manifest() if base is None else self.manifest(run_id, base)
            back, when = self._restore(path, target, _Local(local.version, stats, walked))
            self._save(run_id, _Local(base, back, when))
            self._busy(run_id).unlink(missing_ok=True)
            raise WorkspaceTooLarge(
                f"the workspace grew to {manifest.bytes():,} bytes (apparent size: sparse files "
                f"count whole), over the sandbox's workspace size limit (workspaceMB: "
                f"{limit_bytes >> 20}); this call's changes were not stored and were rolled "
                "back; write less, or raise sandbox.limits.workspaceMB in agent.yaml"
            )
        version = manifest.id()
        if version != base:
            known = {entry[4] for entry in local.stats.values()} if local.version == base else set()
            sources = {v[0]: (p, v[1]) for p, v in manifest.files.items()}

            def upload(digest: str) -> int:
                key = blob_key(digest)
                if self.blobs.exists(key):
                    return 0
                source, size = sources[digest]
                self.blobs.put_file(key, path / source)
                return size

            fresh = [d for d in sources if d not in known]
            self.last.uploaded_bytes += sum(_in_parallel(upload, fresh))
            # Only now: a manifest in the store always has every blob it names.
            self.versions.put_bytes(manifest_key(run_id, version), manifest.to_json())
            if run_id not in self._named:
                # Which run the folder is (its name may be sanitized): retention asks Temporal.
                doc = json.dumps({"run_id": run_id}).encode()
                self.versions.put_bytes(f"{workspace_name(run_id)}/run.json", doc)
                self._named[run_id] = None
                if len(self._named) > NAMED:  # forget the oldest: at worst written again
                    del self._named[next(iter(self._named))]
        self._save(run_id, _Local(version, stats, walked))
        self._busy(run_id).unlink(missing_ok=True)
        self.last.files = len(manifest.files)
        return version

    # -- store ----------------------------------------------------------------------------

    def manifest(self, run_id: str, version: str) -> Manifest:
        """Version `version` of the run's workspace, from the store."""
        try:
            data = self.versions.get_bytes(manifest_key(run_id, version))
        except StoreMissing:
            raise StoreMissing(
                f"workspace version {version} of {run_id!r} is not in the store "
                f"{self.store.url}; every worker of the task queue must use the same TOREN_STORE"
            ) from None
        return Manifest.from_json(data, version)

    # -- local copy -----------------------------------------------------------------------

    def _walk(
        self, path: Path, local: _Local, specials: list[str] | None = None
    ) -> tuple[Manifest, dict[str, list[Any]]]:
        """The directory as a manifest, hashing only files changed since the last walk.

        Entries a version cannot hold (FIFOs, sockets, devices) are left out, and listed in
        `specials` when it is given.
        """
        manifest = Manifest()
        stats: dict[str, list[Any]] = {}
        for relative, st, target in entries(path):
            if target is not None:
                manifest.links[relative] = target
            elif stat.S_ISDIR(st.st_mode):
                manifest.dirs.append(relative)
            elif not stat.S_ISREG(st.st_mode):
                if specials is not None:
                    specials.append(relative)
            else:
                key: _Stat = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                old = local.stats.get(relative)
                fresh = st.st_ctime_ns < local.walked_ns - RACY_NS
                if old is not None and tuple(old[:4]) == key and fresh:
                    digest = str(old[4])
                else:
                    digest = hash_file(path / relative)
                    self.last.hashed_bytes += st.st_size
                manifest.files[relative] = (digest, st.st_size, bool(st.st_mode & 0o111))
                stats[relative] = [*key, digest]
        return manifest, stats

    def _restore(
        self, path: Path, target: Manifest, local: _Local | None
    ) -> tuple[dict[str, list[Any]], int]:
        """Make `path` hold exactly `target`; return its files' stats and when they were taken."""
        specials: list[str] = []
        current, _ = self._walk(path, local or _Local(), specials)
        # Whatever the target does not have, or has as another kind of entry, goes first:
        # a FIFO or socket a half-done call left too, since no version holds one.
        for relative in specials:
            (path / relative).unlink(missing_ok=True)
        wanted_dirs = set(target.dirs)
        for relative in sorted(current.links.keys() | current.files.keys()):
            have, want = current.files.get(relative), target.files.get(relative)
            if have and want and have[0] == want[0]:
                continue
            if relative in target.links and current.links.get(relative) == target.links[relative]:
                continue
            (path / relative).unlink(missing_ok=True)
        for relative in sorted(current.dirs, reverse=True):
            if relative not in wanted_dirs and (path / relative).is_dir():
                shutil.rmtree(path / relative, ignore_errors=True)
        for relative in sorted(target.dirs):
            place = path / relative
            if place.is_symlink() or (place.exists() and not place.is_dir()):
                place.unlink()
            place.mkdir(mode=0o755, parents=True, exist_ok=True)

        def place_file(item: tuple[str, tuple[str, int, bool]]) -> int:
            relative, (digest, size, executable) = item
            place = path / relative
            have = current.files.get(relative)
            fetch = have is None or have[0] != digest
            if fetch:
                if place.is_dir() and not place.is_symlink():
                    shutil.rmtree(place)
                self.blobs.get_file(blob_key(digest), place)
            mode = 0o755 if executable else 0o644
            # Only when it differs, and before the check below: a chmod moves the ctime, and a
            # file whose ctime is within RACY_NS of the end of the restore is hashed again at
            # the next walk (all of them, when every file was chmodded).
            if stat.S_IMODE(os.lstat(place).st_mode) != mode:
                os.chmod(place, mode)
            if fetch and hash_file(place) != digest:
                place.unlink(missing_ok=True)
                raise StoreError(f"blob {digest} in {self.store.url} does not match its name")
            return size if fetch else 0

        self.last.downloaded_bytes += sum(_in_parallel(place_file, sorted(target.files.items())))
        for relative, link in sorted(target.links.items()):
            place = path / relative
            if not place.is_symlink():
                if place.is_dir():
                    shutil.rmtree(place)
                place.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(link, place)
        self.last.files = len(target.files)
        walked = time.time_ns()
        stats: dict[str, list[Any]] = {}
        for relative, (digest, _, _) in target.files.items():
            st = os.lstat(path / relative)
            stats[relative] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest]
        return stats, walked

    def _state_path(self, run_id: str) -> Path:
        # Beside the workspace, never in it: the sandbox cannot rewrite what the host trusts.
        # Named by store too: what this host knows the store has holds for that store only.
        store = hashlib.sha256(self.store.url.encode()).hexdigest()[:8]
        return self.root / f".{workspace_name(run_id)}.{store}.json"

    def _busy(self, run_id: str) -> Path:
        return self.root / f".{workspace_name(run_id)}.busy"

    def _recorded(self, run_id: str) -> str | None:
        """The version the state file names, from its first line's worth of bytes only.

        The stats after it grow with the file count (1.3 MB for 10,000 files); parsing them to
        compare one id cost 15 ms a call there.
        """
        try:
            with open(self._state_path(run_id), "rb") as f:
                match = _HEAD.match(f.read(128))
        except OSError:
            return None
        return match.group(1).decode() if match else None

    def _load(self, run_id: str) -> _Local | None:
        try:
            doc = json.loads(self._state_path(run_id).read_text())
            return _Local(doc["version"], dict(doc["stats"]), int(doc["walked_ns"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent or unreadable: every file gets checked

    def _save(self, run_id: str, local: _Local) -> None:
        target = self._state_path(run_id)
        tmp = target.with_name(target.name + ".tmp")
        # The version first: `_recorded` reads it from the head of the file.
        doc = {"version": local.version, "walked_ns": local.walked_ns, "stats": local.stats}
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, target)


def _in_parallel(fn: Callable[[_T], int], items: Sequence[_T]) -> list[int]:
    """`fn` over `items`, `TRANSFERS` at a time; the first failure is raised (after the rest).

    An object store answers each request in milliseconds: one at a time, a workspace of
    hundreds of small files spends seconds waiting; at once, the waits overlap.
    """
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(TRANSFERS, len(items)), thread_name_prefix="toren-ws") as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]


def download(run_id: str, version: str, dest: Path, store: Store | None = None) -> Manifest:
    """Write version `version` of `run_id`'s workspace into `dest` (created; must be empty)."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; give a new or empty directory")
    spaces = Workspaces(dest.parent, store or open_store())
    manifest = spaces.manifest(run_id, version)
    spaces._restore(dest, manifest, None)
    return manifest
