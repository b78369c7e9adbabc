"""The store: every byte a run keeps outside history, in one place every worker host can reach.

```bash
TOREN_STORE=/srv/toren            # a directory: local, or a mount every host shares (NFS, EFS)
TOREN_STORE=s3://bucket/toren     # S3 or S3-compatible (MinIO): AWS_* variables, AWS_ENDPOINT_URL
```

Unset, it is `.toren` under the worker's directory, so one machine needs no set-up. It holds:

- `attachments/<id>/`: attached files parsed into pages, and files tools returned;
- `secrets/sec_…`: values a tool set with `ctx.set_env` (history keeps only the reference);
- `blobs/sha256/<ab>/<digest>`: workspace files, by content;
- `versions/<run>/<version>.json`: each workspace version, path → digest (`toren.store._workspace`);
- `payloads/`: large payloads, only when `TOREN_STORE` is set (see `toren.store._payloads`).

```python
store = open_store()                    # from TOREN_STORE
store.put_bytes("a/b.txt", b"hi")       # atomic: a reader sees all of it or nothing
store.get_bytes("a/b.txt")              # b"hi"; StoreMissing if absent
store.sub("attachments").exists("x")    # a view under a prefix
```

Objects are written whole (temporary file + rename on a directory, one PUT on S3) and never
changed in place: a key names one content for its lifetime, so readers need no locks.

This module opens the store a setting names and checks it; it holds `DirStore` (a directory).
What every store offers is `toren.store._objects.Store`; the S3 kind is `toren.store._s3`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from toren.errors import ConfigError, StoreError, StoreMissing
from toren.store._objects import Store, StoreEntry, check_key
from toren.store._s3 import S3Store

__all__ = [
    "DEFAULT",
    "ENV_VAR",
    "DirStore",
    "StoreError",
    "StoreMissing",
    "check_store",
    "open_store",
    "parse_location",
    "store_setting",
]

ENV_VAR = "TOREN_STORE"
DEFAULT = ".toren"
"""The store when `TOREN_STORE` is unset: this directory under the current one."""


class DirStore(Store):
    """A directory: one file per key, readable by the worker's user only (0600 in 0700).

    A write goes to a temporary file in the target's directory, is flushed to disk, then
    renamed into place; a reader never sees half an object. On a shared mount (NFS, EFS) every
    host sees an object once its rename returns.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _write(self, key: str, fill: Any) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        except OSError as err:
            raise StoreError(f"cannot write {key} in {self.url}: {err}") from err
        with _removed_on_failure(tmp, f"cannot write {key} in {self.url}"):
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                # A reference to it may enter history as soon as this returns.
                os.fsync(out.fileno())
            os.replace(tmp, path)
            with contextlib.suppress(OSError):
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, lambda out: out.write(data))

    def put_file(self, key: str, path: Path) -> None:
        def copy(out: Any) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, 1024 * 1024)

        self._write(key, copy)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise StoreMissing(f"{key} is not in the store {self.url}") from None
        except OSError as err:
            raise StoreError(f"cannot read {key} from {self.url}: {err}") from err

    def get_file(self, key: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".toren-restore-")
        with _removed_on_failure(tmp, f"cannot restore {key} from {self.url}"):
            try:
                with os.fdopen(fd, "wb") as out, open(self._path(key), "rb") as src:
                    shutil.copyfileobj(src, out, 1024 * 1024)
                os.replace(tmp, dest)
            except FileNotFoundError as err:
                if err.filename == str(self._path(key)):
                    raise StoreMissing(f"{key} is not in the store {self.url}") from None
                raise

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[StoreEntry]:
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            relative = Path(dirpath).relative_to(self.root).as_posix()
            for name in sorted(filenames):
                if name.startswith(".tmp-"):
                    continue  # a write in progress (or one that died): not an object
                key = name if relative == "." else f"{relative}/{name}"
                if not key.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(os.path.join(dirpath, name))
                    yield StoreEntry(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as err:
            raise StoreError(f"cannot delete {key} from {self.url}: {err}") from err


@contextlib.contextmanager
def _removed_on_failure(tmp: str, failed: str) -> Iterator[None]:
    """Remove the temporary file `tmp` when the block fails; an `OSError` becomes a `StoreError`.

    `failed` starts the error's message (`cannot write k in /srv/toren`); the cause follows it.
    """
    try:
        yield
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"{failed}: {err}") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_setting() -> str:
    """`TOREN_STORE` as set, or `""` when it is unset or empty."""
    return os.environ.get(ENV_VAR, "").strip()


_opened: dict[tuple[str, str], Store] = {}
_opened_lock = threading.Lock()


def open_store(value: str | None = None) -> Store:
    """The store `value` names (default: `TOREN_STORE`, else `.toren` in the cwd).

    The same value gives the same `Store` object in a process, so its S3 client is shared.

    Raises:
        ConfigError: the value has an unknown scheme, or an S3 URL has no bucket; the message
            names `TOREN_STORE` and the forms it takes.
    """
    raw = (store_setting() if value is None else value.strip()) or DEFAULT
    cache_key = (raw, os.getcwd() if not raw.startswith(("s3:", "/")) else "")
    with _opened_lock:
        store = _opened.get(cache_key)
        if store is None:
            store = _opened[cache_key] = _parse(raw)
        return store


def _parse(raw: str) -> Store:
    kind, where, prefix = parse_location(raw)
    return S3Store(where, prefix) if kind == "s3" else DirStore(where)


def parse_location(raw: str, setting: str = ENV_VAR) -> tuple[str, str, str]:
    """`("s3", bucket, prefix)` or `("dir", path, "")` for a store setting's value.

    Accepts `s3://bucket[/prefix]`, `file:///abs/dir` and a directory path.

    Raises:
        ConfigError: an unknown scheme, an S3 URL without a bucket, or a file URL naming
            another host; the message names `setting` and the forms it takes.
    """
    parsed = urlparse(raw)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"{setting}={raw!r}: an S3 store needs a bucket: s3://bucket/prefix")
        return "s3", parsed.netloc, unquote(parsed.path)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"{setting}={raw!r}: a file:// store must be on this host")
        return "dir", unquote(parsed.path), ""
    # One letter before a colon is a Windows drive, not a scheme.
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ConfigError(
            f"{setting}={raw!r}: unsupported scheme {parsed.scheme!r}; use a directory, "
            "file:///dir or s3://bucket/prefix"
        )
    return "dir", raw, ""


def check_store(store: Store | None = None, setting: str = ENV_VAR) -> Store:
    """Write, read back and delete a probe object: a worker calls this before it starts.

    Args:
        store: the store to check (default: `open_store()`).
        setting: the variable that named it, for the message.

    Raises:
        ConfigError: the store cannot be reached or written; the message names the setting,
            where it points and the reason (bucket missing, no credentials, permission...).
    """
    store = store or open_store()
    # At the top, in no directory of its own: workers starting together each removed a shared
    # `probe/` as they finished, and one's mkdir met another's rmdir (`File exists`).
    key = f"probe-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}"
    try:
        store.put_bytes(key, b"toren")
        if store.get_bytes(key) != b"toren":
            raise StoreError(f"{key} read back different bytes")
        store.delete(key)
    except (StoreError, ValueError) as err:
        cause = err.__cause__ or err
        raise ConfigError(
            f"{setting}={os.environ.get(setting, '').strip() or DEFAULT!r}: the store at "
            f"{store.url} cannot be used "
            f"({cause}); every worker needs to read and write it: fix the path or bucket, its "
            "permissions, or the AWS_* credentials and AWS_ENDPOINT_URL"
        ) from None
    return store
