"""What every store is: objects by key, whole or absent, and views under a prefix.

`Store` is the contract `DirStore` (`toren.store._store`) and `S3Store` (`toren.store._s3`)
keep; `sub` gives a view of the objects under a prefix, itself a `Store`.

```python
store.sub("attachments").put_bytes("att_1/meta.json", data)   # key attachments/att_1/meta.json
[entry.key for entry in store.sub("versions").list("run-1/")]   # ["run-1/<id>.json", ...]
```
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Store", "StoreEntry", "check_key"]

_KEY = re.compile(r"^[A-Za-z0-9_.=+@:-][A-Za-z0-9_.=+@:/-]*$")


@dataclass(frozen=True)
class StoreEntry:
    """One object, as `Store.list` yields it."""

    key: str
    """Relative to the store (or view) it was listed from."""
    size: int
    mtime: float
    """Last written, in seconds since the epoch."""


def check_key(key: str) -> str:
    """`key` itself, when it is a relative path of safe characters (no `.`, `..` or empty part).

    Raises:
        ValueError: it is not.
    """
    if not _KEY.match(key) or any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"not a store key: {key!r}")
    return key


class Store(ABC):
    """Objects by key: bytes or files in, bytes or files out. See the module docstring."""

    url: str
    """Where it is, for messages: a directory or `s3://bucket/prefix`."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` under `key`, whole or not at all."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Write the file at `path` under `key`, whole or not at all (streamed)."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """The object's bytes; `StoreMissing` when absent."""

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> None:
        """Write the object to `dest` (through a temporary file beside it, then a rename)."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether `key` holds an object."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[StoreEntry]:
        """Every object whose key starts with `prefix` (a folder, ending in `/`, or a name)."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens when it is absent)."""

    def sub(self, prefix: str) -> Store:
        """A view of the objects under `prefix/`."""
        return _View(self, check_key(prefix.strip("/")) + "/")


class _View(Store):
    def __init__(self, base: Store, prefix: str) -> None:
        self.base, self.prefix = base, prefix
        self.url = base.url.rstrip("/") + "/" + prefix

    def put_bytes(self, key: str, data: bytes) -> None:
        self.base.put_bytes(self.prefix + check_key(key), data)

    def put_file(self, key: str, path: Path) -> None:
        self.base.put_file(self.prefix + check_key(key), path)

    def get_bytes(self, key: str) -> bytes:
        return self.base.get_bytes(self.prefix + check_key(key))

    def get_file(self, key: str, dest: Path) -> None:
        self.base.get_file(self.prefix + check_key(key), dest)

    def exists(self, key: str) -> bool:
        return self.base.exists(self.prefix + check_key(key))

    def list(self, prefix: str = "") -> Iterator[StoreEntry]:
        for entry in self.base.list(self.prefix + prefix):
            yield StoreEntry(entry.key[len(self.prefix) :], entry.size, entry.mtime)

    def delete(self, key: str) -> None:
        self.base.delete(self.prefix + check_key(key))

    def sub(self, prefix: str) -> Store:
        return _View(self.base, self.prefix + check_key(prefix.strip("/")) + "/")
