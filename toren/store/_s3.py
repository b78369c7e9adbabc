"""`S3Store`: the store in an S3 bucket (or an S3-compatible server such as MinIO), via boto3.

```bash
TOREN_STORE=s3://bucket/toren AWS_ENDPOINT_URL=http://minio:9000 toren worker ...
```

boto3 is an extra (`pip install 'toren[s3]'`), imported on first use only.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toren.errors import ConfigError, StoreError, StoreMissing
from toren.store._objects import Store, StoreEntry, check_key

__all__ = ["S3Store"]


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
                        f"TOREN_STORE={self.url} needs boto3: pip install 'toren[s3]'"
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
        k = self.prefix + check_key(key)
        self._call("write", key, lambda c: c.put_object(Bucket=self.bucket, Key=k, Body=data))

    def put_file(self, key: str, path: Path) -> None:
        k = self.prefix + check_key(key)
        # upload_file goes multipart for large files; the object appears only when complete.
        self._call("write", key, lambda c: c.upload_file(str(path), self.bucket, k))

    def get_bytes(self, key: str) -> bytes:
        k = self.prefix + check_key(key)
        body = self._call("read", key, lambda c: c.get_object(Bucket=self.bucket, Key=k))
        return self._call("read", key, lambda c: body["Body"].read())  # type: ignore[no-any-return]

    def get_file(self, key: str, dest: Path) -> None:
        k = self.prefix + check_key(key)
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
        k = self.prefix + check_key(key)
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
        k = self.prefix + check_key(key)
        self._call("delete", key, lambda c: c.delete_object(Bucket=self.bucket, Key=k))
