"""Large payloads outside history: Temporal's `ExternalStorage` with a file or S3 driver.

A tool that returns megabytes must not put them in the run's history (Temporal refuses a blob
over 2 MB and a history over 50 MB). With external storage configured, every payload at or
above a threshold (256 KiB by default) is written to a store by the data converter and the
history keeps a small reference; workers and clients read it back transparently.

```bash
TOREN_STORE=s3://my-bucket/toren            # payloads under s3://my-bucket/toren/payloads
TOREN_STORE=/srv/toren                      # payloads under /srv/toren/payloads
TOREN_PAYLOAD_STORE=s3://other-bucket/p     # the older setting: payloads alone, wins when set
```

Payloads leave history only when one of the two is set: the default store (`.toren` in the
current directory) is not used for them, since every client reading a run (the `temporal`
CLI, clients in other languages) would need it too.

```python
client = await Client.connect(address, data_converter=storage.data_converter())
```

Every client and worker of a namespace must use the same store: a worker without it cannot
read a reference another one wrote. Without a store, toren cuts a tool result to what a
history can hold (`toren.agent._payload_limits`); with one, `result_limit` lets it through whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from toren.agent._converter import data_converter as pydantic_converter
from toren.agent._payload_limits import MAX_RESULT_BYTES
from toren.store._store import parse_location

__all__ = [
    "DEFAULT_THRESHOLD",
    "ENV_VAR",
    "STORED_RESULT_LIMIT",
    "FileStorageDriver",
    "S3Client",
    "close_storage",
    "data_converter",
    "driver_for",
    "payload_store_setting",
    "result_limit",
]

ENV_VAR = "TOREN_PAYLOAD_STORE"
"""Where large payloads go: a directory (`/path`, `file:///path`) or `s3://bucket/prefix`."""
DEFAULT_THRESHOLD = 256 * 1024
"""Payloads at least this large (serialized bytes) go to the store; smaller ones stay inline."""
STORED_RESULT_LIMIT = 32 * 1024 * 1024
"""Longest tool result (UTF-8 bytes) kept whole with a store: below the S3 driver's 50 MiB
cap, so a completion never fails on size (it would be retried like a dead worker). Without a
store the limit is `toren.agent._payload_limits.MAX_RESULT_BYTES`."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


class FileStorageDriver(StorageDriver):
    """Content-addressed payload files under one directory (one host, or a shared mount).

    A payload is stored once as `<root>/sha256/<ab>/<digest>`: written to a temporary file in
    the same directory, flushed to disk, then renamed into place, so a reader never sees half
    a file and two writers of the same payload cannot corrupt it. The claim carries the
    relative key and the digest; retrieval rebuilds the path from the digest alone (a claim is
    read from history, so it must not be able to name an arbitrary file) and checks it.

    Nothing is ever deleted: prune files older than the namespace's retention period.
    """

    def __init__(self, root: str | Path, driver_name: str = "toren.file") -> None:
        """Create the driver.

        Args:
            root: the directory (created if absent).
            driver_name: the name references carry; readers need a driver of the same name.
        """
        self.root = Path(root).expanduser().resolve()
        self._name = driver_name

    def name(self) -> str:
        """The driver instance's name, recorded in every reference."""
        return self._name

    def type(self) -> str:
        """The driver type, the same for every instance."""
        return "toren.file"

    def _path(self, digest: str) -> Path:
        return self.root / "sha256" / digest[:2] / digest

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Write each payload (unless already there) and return its claim."""
        # File IO off the event loop: workflow activations share it with this converter.
        return list(await asyncio.gather(*(asyncio.to_thread(self._store, p) for p in payloads)))

    def _store(self, payload: Payload) -> StorageDriverClaim:
        data = payload.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if not (path.exists() and path.stat().st_size == len(data)):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{digest[:8]}.")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    # The reference is in history as soon as this returns: the bytes must be on
                    # disk before a crash could lose them.
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                # And the rename itself: it lives in the directory's own blocks.
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        key = path.relative_to(self.root).as_posix()
        return StorageDriverClaim(
            claim_data={"key": key, "hash_algorithm": "sha256", "hash_value": digest}
        )

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Read each claimed payload back, checking its digest."""
        return list(await asyncio.gather(*(asyncio.to_thread(self._retrieve, c) for c in claims)))

    def _retrieve(self, claim: StorageDriverClaim) -> Payload:
        digest = claim.claim_data.get("hash_value", "")
        if claim.claim_data.get("hash_algorithm") != "sha256" or not _HEX64.fullmatch(digest):
            raise ValueError(f"{self._name}: malformed claim {dict(claim.claim_data)}")
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{self._name}: payload {digest} is not in {self.root}; every client and "
                f"worker must use the same {ENV_VAR}"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{self._name}: {path} does not match its digest")
        payload = Payload()
        payload.ParseFromString(data)
        return payload


class S3Client(S3StorageDriverClient):
    """An aioboto3 S3 client opened on first use, with an optional key prefix.

    The driver is built where no event loop runs yet (a plugin's constructor), and an aioboto3
    client belongs to the loop that opened it; so it is opened lazily, and again if a call
    comes from another loop. `AWS_ENDPOINT_URL` (or `endpoint_url`) points it at MinIO, moto
    or another S3-compatible server; credentials and region come from the usual AWS chain.
    """

    def __init__(
        self, prefix: str = "", endpoint_url: str | None = None, region: str | None = None
    ) -> None:
        """Create the client (nothing connects until the first call).

        Args:
            prefix: prepended to every object key (`toren/` puts payloads under `toren/v0/`).
            endpoint_url: an S3-compatible endpoint; default `AWS_ENDPOINT_URL`, else AWS.
            region: default `AWS_REGION`/`AWS_DEFAULT_REGION`, else boto's own default.
        """
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self.region = region or os.environ.get("AWS_REGION") or None
        self._inner: S3StorageDriverClient | None = None
        self._context: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    async def _client(self) -> S3StorageDriverClient:
        loop = asyncio.get_running_loop()
        if self._inner is not None and self._loop is loop:
            return self._inner
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop, self._inner = asyncio.Lock(), loop, None
        async with self._lock:
            if self._inner is None:
                # Imported by name here: aioboto3 is an optional extra that only this store
                # needs, and neither its import nor its types may be required elsewhere.
                try:
                    aioboto3 = importlib.import_module("aioboto3")
                    adapter = importlib.import_module("temporalio.contrib.aws.s3driver.aioboto3")
                except ImportError as err:
                    raise RuntimeError(
                        f"{ENV_VAR}=s3://... needs aioboto3: pip install 'temporalio[aioboto3]'"
                    ) from err
                context = aioboto3.Session().client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region
                )
                self._inner = adapter.new_aioboto3_client(await context.__aenter__())
                self._context = context
            return self._inner

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        """Upload `data` under the prefixed key."""
        await (await self._client()).put_object(bucket=bucket, key=self.prefix + key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        """Whether the prefixed key exists."""
        return await (await self._client()).object_exists(bucket=bucket, key=self.prefix + key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        """Download the prefixed key."""
        return await (await self._client()).get_object(bucket=bucket, key=self.prefix + key)

    def describe(self) -> Mapping[str, str]:
        """Endpoint and prefix, added to the driver's error messages."""
        info = {"endpoint": self.endpoint_url or "aws", "prefix": self.prefix or "(none)"}
        if self.region:
            info["region"] = self.region
        return info

    async def aclose(self) -> None:
        """Close the underlying HTTP session (a no-op if it never opened)."""
        context, self._context, self._inner = self._context, None, None
        if context is not None:
            await context.__aexit__(None, None, None)


class _S3Driver(S3StorageDriver):
    """Temporal's S3 driver, keeping its client so `close_storage` can close it."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        super().__init__(client=client, bucket=bucket)
        self.s3 = client


def driver_for(store: str) -> StorageDriver:
    """The driver a `TOREN_PAYLOAD_STORE` value names.

    Args:
        store: `s3://bucket[/prefix]`, `file:///abs/dir`, or a directory path.

    Raises:
        ConfigError: an unknown scheme, an S3 URL without a bucket, or a file URL on another host.
    """
    kind, where, prefix = parse_location(store, ENV_VAR)
    if kind == "s3":
        return _S3Driver(S3Client(prefix=prefix), where)
    return FileStorageDriver(where)


def payload_store_setting() -> str:
    """Where payloads go: `TOREN_PAYLOAD_STORE`, else `payloads/` in a set `TOREN_STORE`."""
    own = os.environ.get(ENV_VAR, "").strip()
    if own:
        return own
    shared = os.environ.get("TOREN_STORE", "").strip()
    return shared.rstrip("/") + "/payloads" if shared else ""


def data_converter(
    store: str | None = None,
    *,
    threshold: int = DEFAULT_THRESHOLD,
    base: DataConverter = pydantic_converter,
) -> DataConverter:
    """The toren data converter, with external storage when a store is configured.

    Args:
        store: a `TOREN_PAYLOAD_STORE` value; `None` reads the settings
            (`payload_store_setting`); empty means none.
        threshold: payloads at least this many serialized bytes go to the store.
        base: the converter to extend (toren's pydantic converter).

    Returns:
        `base` itself without a store, else a copy of it with `ExternalStorage`.
    """
    if store is None:
        store = payload_store_setting()
    if not store.strip():
        return base
    storage = ExternalStorage(drivers=[driver_for(store.strip())], payload_size_threshold=threshold)
    return dataclasses.replace(base, external_storage=storage)


async def close_storage(converter: DataConverter) -> None:
    """Close the S3 sessions of `converter`'s drivers (call once, at shutdown)."""
    storage = converter.external_storage
    for driver in storage.drivers if storage else ():
        if isinstance(driver, _S3Driver):
            await driver.s3.aclose()


def result_limit() -> int:
    """The longest tool result the current activity may return whole, in UTF-8 bytes.

    `toren.agent._payload_limits.MAX_RESULT_BYTES` keeps a result under Temporal's 2 MB payload
    limit; with external storage that limit no longer applies to it, so only `STORED_RESULT_LIMIT`
    does.
    """
    try:
        converter = activity.client().data_converter
    except RuntimeError:
        # Outside an activity, or a sync one (no client there): assume no store.
        return MAX_RESULT_BYTES
    return STORED_RESULT_LIMIT if converter.external_storage else MAX_RESULT_BYTES
