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
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from toren.errors import ConfigError, StoreError, StoreMissing

__all__ = [
    "DEFAULT",
    "ENV_VAR",
    "DirStore",
    "S3Store",
    "Store",
    "StoreEntry",
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

_KEY = re.compile(r"^[A-Za-z0-9_.=+@:-][A-Za-z0-9_.=+@:/-]*$")


@dataclass(frozen=True)
class StoreEntry:
    """One object, as `Store.list` yields it."""

    key: str
    """Relative to the store (or view) it was listed from."""
    size: int
    mtime: float
    """Last written, in seconds since the epoch."""


def _check_key(key: str) -> str:
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
        return _View(self, _check_key(prefix.strip("/")) + "/")


class _View(Store):
    def __init__(self, base: Store, prefix: str) -> None:
        self.base, self.prefix = base, prefix
        self.url = base.url.rstrip("/") + "/" + prefix

    def put_bytes(self, key: str, data: bytes) -> None:
        self.base.put_bytes(self.prefix + _check_key(key), data)

    def put_file(self, key: str, path: Path) -> None:
        self.base.put_file(self.prefix + _check_key(key), path)

    def get_bytes(self, key: str) -> bytes:
        return self.base.get_bytes(self.prefix + _check_key(key))

    def get_file(self, key: str, dest: Path) -> None:
        self.base.get_file(self.prefix + _check_key(key), dest)

    def exists(self, key: str) -> bool:
        return self.base.exists(self.prefix + _check_key(key))

    def list(self, prefix: str = "") -> Iterator[StoreEntry]:
        for entry in self.base.list(self.prefix + prefix):
            yield StoreEntry(entry.key[len(self.prefix) :], entry.size, entry.mtime)

    def delete(self, key: str) -> None:
        self.base.delete(self.prefix + _check_key(key))

    def sub(self, prefix: str) -> Store:
        return _View(self.base, self.prefix + _check_key(prefix.strip("/")) + "/")


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
        return self.root / _check_key(key)

    def _write(self, key: str, fill: Any) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        except OSError as err:
            raise StoreError(f"cannot write {key} in {self.url}: {err}") from err
        try:
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
        except OSError as err:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"cannot write {key} in {self.url}: {err}") from err
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

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
        try:
            with os.fdopen(fd, "wb") as out, open(self._path(key), "rb") as src:
                shutil.copyfileobj(src, out, 1024 * 1024)
            os.replace(tmp, dest)
        except FileNotFoundError as err:
            Path(tmp).unlink(missing_ok=True)
            if err.filename == str(self._path(key)):
                raise StoreMissing(f"{key} is not in the store {self.url}") from None
            raise StoreError(f"cannot restore {key} from {self.url}: {err}") from err
        except OSError as err:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"cannot restore {key} from {self.url}: {err}") from err
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
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


class S3Store(Store):
    """An S3 bucket (or S3-compatible server) under a key prefix, through boto3.

    Credentials, region and endpoint come from the standard AWS chain (`AWS_ACCESS_KEY_ID`,
    `AWS_REGION`, `AWS_ENDPOINT_URL`, profiles, instance roles). The client is made on first
    use; boto3 clients are safe to share between threads.
    """

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self.url = f"s3://{bucket}/{self.prefix}"
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The boto3 S3 client (made on first use)."""
        with self._lock:
            if self._client is None:
                try:
                    import boto3  # type: ignore[import-untyped]
                    from botocore.config import Config
                except ImportError as err:
                    raise ConfigError(
                        f"{ENV_VAR}={self.url} needs boto3: pip install 'toren[s3]'"
                    ) from err
                config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3})
                self._client = boto3.client("s3", endpoint_url=self.endpoint_url, config=config)
            return self._client

    def _call(self, what: str, key: str, fn: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(self.client())
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                raise StoreMissing(f"{key} is not in the store {self.url}") from None
            raise StoreError(f"cannot {what} {key} in {self.url}: {err}") from err
        except (BotoCoreError, OSError) as err:
            raise StoreError(f"cannot {what} {key} in {self.url}: {err}") from err

    def put_bytes(self, key: str, data: bytes) -> None:
        k = self.prefix + _check_key(key)
        self._call("write", key, lambda c: c.put_object(Bucket=self.bucket, Key=k, Body=data))

    def put_file(self, key: str, path: Path) -> None:
        k = self.prefix + _check_key(key)
        # upload_file goes multipart for large files; the object appears only when complete.
        self._call("write", key, lambda c: c.upload_file(str(path), self.bucket, k))

    def get_bytes(self, key: str) -> bytes:
        k = self.prefix + _check_key(key)
        body = self._call("read", key, lambda c: c.get_object(Bucket=self.bucket, Key=k))
        return self._call("read", key, lambda c: body["Body"].read())  # type: ignore[no-any-return]

    def get_file(self, key: str, dest: Path) -> None:
        k = self.prefix + _check_key(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".toren-restore-")
        os.close(fd)
        try:
            self._call("read", key, lambda c: c.download_file(self.bucket, k, tmp))
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def exists(self, key: str) -> bool:
        k = self.prefix + _check_key(key)
        try:
            self._call("check", key, lambda c: c.head_object(Bucket=self.bucket, Key=k))
        except StoreMissing:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[StoreEntry]:
        def pages(c: Any) -> list[Any]:
            paginator = c.get_paginator("list_objects_v2")
            return list(paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix))

        for page in self._call("list", prefix or "/", pages):
            for obj in page.get("Contents", ()):
                yield StoreEntry(
                    obj["Key"][len(self.prefix) :], int(obj["Size"]),
                    obj["LastModified"].timestamp(),
                )  # fmt: skip

    def delete(self, key: str) -> None:
        k = self.prefix + _check_key(key)
        self._call("delete", key, lambda c: c.delete_object(Bucket=self.bucket, Key=k))


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
    key = f"probe/{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}"
    try:
        store.put_bytes(key, b"toren")
        if store.get_bytes(key) != b"toren":
            raise StoreError(f"{key} read back different bytes")
        store.delete(key)
        if isinstance(store, DirStore):
            with contextlib.suppress(OSError):
                (store.root / "probe").rmdir()  # empty unless another worker probes now
    except (StoreError, ValueError) as err:
        cause = err.__cause__ or err
        raise ConfigError(
            f"{setting}={os.environ.get(setting, '').strip() or DEFAULT!r}: the store at "
            f"{store.url} cannot be used "
            f"({cause}); every worker needs to read and write it: fix the path or bucket, its "
            "permissions, or the AWS_* credentials and AWS_ENDPOINT_URL"
        ) from None
    return store
