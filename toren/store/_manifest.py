"""A workspace version: its manifest, where versions and blobs are kept, and the newest one.

A version is a manifest (`versions/<run>/<id>.json`: path → sha256, size, executable bit;
directories; symlinks) whose files are blobs by content (`blobs/sha256/<ab>/<digest>`). Its id
is the sha256 of the manifest's canonical JSON, so a version names exactly one set of files.

```python
manifest = Manifest(files={"a.txt": (digest, 5, False)})
manifest.id()                                   # sha256 of manifest.to_json()
Manifest.from_json(data, expected_id)           # refused unless it hashes to that id
```
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from toren.store._objects import Store
from toren.store._store import StoreError, open_store
from toren.store._workspace_dirs import workspace_name

__all__ = [
    "VERSION",
    "Manifest",
    "blob_key",
    "latest_version",
    "manifest_key",
    "safe_path",
]

VERSION = 1
"""The manifest format; a manifest of another version is refused, not misread."""
_VERSION_FILE = re.compile(r"[0-9a-f]{64}\.json")


@dataclass
class Manifest:
    """One version of a workspace: what `commit` stored and `prepare` restores."""

    files: dict[str, tuple[str, int, bool]] = field(default_factory=dict)
    """Relative path → (sha256, size, executable)."""
    dirs: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    """Relative path → symlink target, kept as text (never followed here)."""

    def to_json(self) -> bytes:
        """The canonical JSON whose sha256 is the version id."""
        doc = {
            "v": VERSION,
            "files": {p: list(v) for p, v in sorted(self.files.items())},
            "dirs": sorted(self.dirs),
            "links": dict(sorted(self.links.items())),
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    def id(self) -> str:
        """The version id: sha256 of `to_json()`."""
        return hashlib.sha256(self.to_json()).hexdigest()

    @classmethod
    def from_json(cls, data: bytes, expected_id: str) -> Manifest:
        """Parse a stored manifest, checking it hashes to `expected_id`."""
        if hashlib.sha256(data).hexdigest() != expected_id:
            raise StoreError(f"workspace version {expected_id} in the store does not match its id")
        doc = json.loads(data)
        if doc.get("v") != VERSION:
            raise StoreError(f"workspace version {expected_id} has format {doc.get('v')!r}")
        files = {p: (str(d), int(s), bool(x)) for p, (d, s, x) in doc["files"].items()}
        manifest = cls(files=files, dirs=list(doc["dirs"]), links=dict(doc["links"]))
        problems = manifest.path_problems()
        if problems:
            # Hash-valid is not enough: whoever can write the store can plant a manifest and
            # name its id, and a restore writes wherever its paths point.
            raise StoreError(
                f"workspace version {expected_id} is refused: {'; '.join(problems[:5])}"
                + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
            )
        return manifest

    def path_problems(self) -> list[str]:
        """Why a path it names could land outside the workspace (empty when none could).

        Every path must be relative, normalized (no `.`, `..` or empty part, no NUL) and must
        not pass through a symlink the version itself makes.
        """
        problems = []
        every = [*self.files, *self.dirs, *self.links]
        for relative in every:
            if not isinstance(relative, str) or not safe_path(relative):
                problems.append(f"path {relative!r} is not a plain relative path")
        for relative, (digest, _, _) in self.files.items():
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                problems.append(f"file {relative!r} names {digest!r}, not a sha256 digest")
        links = set(self.links)
        for relative in every:
            if isinstance(relative, str) and links:
                parts = relative.split("/")
                through = ["/".join(parts[:i]) for i in range(1, len(parts))]
                hit = next((p for p in through if p in links), None)
                if hit is not None:
                    problems.append(f"path {relative!r} passes through symlink {hit!r}")
        return problems

    def bytes(self) -> int:
        """The size of every file it names."""
        return sum(size for _, size, _ in self.files.values())


def safe_path(relative: str) -> bool:
    """Whether `relative` is a normalized path below the workspace (`a/b`, not `../a`, `/a`)."""
    if not relative or "\0" in relative or relative.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in relative.split("/"))


def blob_key(digest: str) -> str:
    """Where a file's content is, under the store's `blobs/`: by its sha256 `digest`."""
    return f"sha256/{digest[:2]}/{digest}"


def manifest_key(run_id: str, version: str) -> str:
    """Where version `version` of the run's workspace is, under the store's `versions/`."""
    if len(version) != 64 or any(c not in "0123456789abcdef" for c in version):
        raise StoreError(f"{version!r} is not a workspace version id")
    return f"{workspace_name(run_id)}/{version}.json"


def latest_version(run_id: str, store: Store | None = None) -> str | None:
    """The newest version in the store of `run_id`'s workspace (by time written), or None.

    History is what names a run's versions; this is for a run whose history is gone.
    """
    versions = (store or open_store()).sub("versions")
    # Only manifests: the folder also holds `run.json`, which names the run.
    manifests = [
        entry
        for entry in versions.list(workspace_name(run_id) + "/")
        if _VERSION_FILE.fullmatch(entry.key.rpartition("/")[2])
    ]
    newest = max(manifests, key=lambda e: e.mtime, default=None)
    return newest.key.rpartition("/")[2].removesuffix(".json") if newest else None
