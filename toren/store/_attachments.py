"""Attachments: files parsed once into ~4,000-character pages, stored by content hash.

```python
from toren.store._attachments import attach, open_store

info = attach("report.pdf")           # AttachmentInfo(id='att_3f2a...', pages=12, ...)
attach(csv_bytes, name="totals.csv")  # bytes need a name for their type
store = open_store()                  # the same store the worker's read_attachment uses
store.page(info.id, 1)                # the first page's text
```

Start a run with `attachments=[info.id]` and the agent reads it with the `read_attachment`
built-in. PDF, Word .docx, Excel .xlsx and text are supported (`toren.store._parsers` turns them
into text and pages); `pip install 'toren[files]'` adds the parsers. Files over 15 MB are refused.

They live in the store (`toren.store._store`) under `attachments/`: `TOREN_STORE` (a directory every
host shares, or `s3://bucket/prefix`; default `.toren` under the current directory), or the
older `TOREN_ATTACHMENTS` (a directory holding only attachments), or `store=`. Each attachment
is `<id>/pages/000001.txt`... then `<id>/meta.json`, written last: an attachment is there for
readers once its `meta.json` is, whole. The id is `att_` + the first 16 hex digits of the
SHA-256 of the bytes: attaching the same content twice gives the same id and parses once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toren.agent._context import Attachment
from toren.errors import AttachmentError
from toren.store._objects import Store
from toren.store._parsers import detect_type, extension_for, extract_text, split_pages
from toren.store._store import DirStore, StoreMissing
from toren.store._store import open_store as open_shared_store

__all__ = [
    "ENV_VAR",
    "MAX_BYTES",
    "AttachmentError",
    "AttachmentInfo",
    "AttachmentStore",
    "attach",
    "default_root",
    "open_store",
    "store_result_attachments",
]

MAX_BYTES = 15 * 1024 * 1024
"""Largest file accepted (15 MB)."""

BLOB_CHUNK = 1_750_000
"""Files tools return are stored in chunks of this many bytes (~1.75 MB)."""

ENV_VAR = "TOREN_ATTACHMENTS"
"""The older setting: a directory for attachments alone; `TOREN_STORE` when it is unset."""

_ID = re.compile(r"^att_[0-9a-f]{16}$")


@dataclass(frozen=True)
class AttachmentInfo:
    """What `attach` returns and `meta.json` holds."""

    id: str
    """`att_` + the first 16 hex digits of the SHA-256 of the file's bytes."""
    name: str
    """The file's name (from its path, or the `name=` given with bytes)."""
    pages: int
    """How many ~4,000-character pages its text has (at least 1)."""
    size: int
    """The file's size in bytes."""
    mime: str
    """The type it was parsed as, e.g. `application/pdf` or `text/csv`."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as in `meta.json`."""
        return asdict(self)


def default_root() -> Store:
    """Where attachments go: `$TOREN_ATTACHMENTS`, else `attachments/` in `TOREN_STORE`."""
    configured = os.environ.get(ENV_VAR, "").strip()
    if configured:
        return DirStore(configured)
    return open_shared_store().sub("attachments")


def open_store(store: str | Path | Store | AttachmentStore | None = None) -> AttachmentStore:
    """The attachments at `store` (a directory or a `Store`), or the default ones."""
    if isinstance(store, AttachmentStore):
        return store
    return AttachmentStore(store if store is not None else default_root())


def attach(
    path_or_bytes: str | Path | bytes,
    name: str | None = None,
    store: str | Path | Store | AttachmentStore | None = None,
) -> AttachmentInfo:
    """Parse a file into pages and store it; the same content returns the stored attachment.

    Args:
        path_or_bytes: A file path, or the file's bytes.
        name: The name to record (and take the type from); defaults to the path's name.
            Bytes without a name are typed by their content and named `<id>.<ext>`. Content
            attached before keeps the name it was first attached under.
        store: The store directory (or store); defaults to `default_root()`.

    Returns:
        The attachment's id, name, page count, size and type.

    Raises:
        AttachmentError: The file is missing, over 15 MB, of an unsupported type, or its parser
            failed or is not installed.
    """
    return open_store(store).attach(path_or_bytes, name)


class AttachmentStore:
    """Parsed attachments in a store; see the module docstring for their layout.

    Args:
        root: A directory (created on the first attach) or a `Store` (view).
    """

    def __init__(self, root: str | Path | Store) -> None:
        self.objects = root if isinstance(root, Store) else DirStore(root)
        self.root: Path | str = (
            self.objects.root if isinstance(self.objects, DirStore) else self.objects.url
        )
        """The directory (a `DirStore`), else the store's URL."""

    def __repr__(self) -> str:
        return f"AttachmentStore({str(self.root)!r})"

    def attach(self, path_or_bytes: str | Path | bytes, name: str | None = None) -> AttachmentInfo:
        """Parse and store a file (see `attach`)."""
        data, name = _read(path_or_bytes, name)
        file_id = "att_" + hashlib.sha256(data).hexdigest()[:16]
        if self.objects.exists(f"{file_id}/meta.json"):
            return self.info(file_id)  # parsed once: the same bytes always parse the same
        mime = detect_type(data, name)
        text = extract_text(data, name, mime)
        # Unnamed bytes get a name the model can refer to, typed like the content.
        name = name or file_id + extension_for(mime)
        pages = split_pages(text)
        info = AttachmentInfo(id=file_id, name=name, pages=len(pages), size=len(data), mime=mime)
        self._write(info, pages)
        return info

    def info(self, file_id: str) -> AttachmentInfo:
        """The stored attachment's metadata.

        Raises:
            AttachmentError: `file_id` is malformed or not in this store.
        """
        try:
            data = json.loads(self.objects.get_bytes(f"{self._dir(file_id)}/meta.json"))
        except StoreMissing:
            raise AttachmentError(
                f"attachment {file_id!r} is not in the store at {str(self.root)!r}; attach the "
                f"file again, or point TOREN_STORE at the store it was attached to"
            ) from None
        return AttachmentInfo(
            id=data["id"],
            name=data["name"],
            pages=int(data["pages"]),
            size=int(data["size"]),
            mime=data["mime"],
        )

    def page(self, file_id: str, page: int) -> str:
        """The text of page `page` (1-based) of `file_id`.

        Raises:
            AttachmentError: Unknown id, or `page` out of range.
        """
        info = self.info(file_id)
        if not 1 <= page <= info.pages:
            raise AttachmentError(
                f"page {page} out of range: {file_id} has {info.pages} "
                f"page{'s' if info.pages != 1 else ''}; ask for page 1 to {info.pages}"
            )
        return self.objects.get_bytes(f"{file_id}/pages/{page:06d}.txt").decode("utf-8")

    def _dir(self, file_id: str) -> str:
        # Ids become path components: anything but att_<16 hex> could climb out of the store.
        if not isinstance(file_id, str) or not _ID.match(file_id):
            raise AttachmentError(
                f"{file_id!r} is not an attachment id; ids look like 'att_' + 16 hex digits, "
                "as `attach` returned them"
            )
        return file_id

    def _write(self, info: AttachmentInfo, pages: list[str]) -> None:
        files = {f"pages/{n:06d}.txt": t.encode() for n, t in enumerate(pages, start=1)}
        self._publish(info.id, info.to_dict(), files)

    def _publish(self, file_id: str, meta: dict[str, Any], files: dict[str, bytes]) -> None:
        """Write `files`, then `meta.json`: readers take an attachment to exist by its meta."""
        for relative, data in files.items():
            self.objects.put_bytes(f"{file_id}/{relative}", data)
        meta = {**meta, "created": dt.datetime.now(dt.UTC).isoformat()}
        self.objects.put_bytes(f"{file_id}/meta.json", json.dumps(meta, indent=2).encode())

    # -- files tools return (images, exports): bytes by id, in chunks ----------------------

    def put_blob(
        self,
        data: bytes,
        name: str,
        mime: str,
        width: int | None = None,
        height: int | None = None,
    ) -> dict[str, Any]:
        """Store a file a tool returned, unparsed, in `BLOB_CHUNK`-byte chunks; return its ref.

        The ref (id, name, type, size, chunks, width, height) is what enters history.
        """
        if len(data) > MAX_BYTES:
            raise _too_big(name, len(data))
        file_id = "att_" + hashlib.sha256(data).hexdigest()[:16]
        chunks = [data[i : i + BLOB_CHUNK] for i in range(0, len(data), BLOB_CHUNK)] or [b""]
        ref = {
            "id": file_id,
            "name": name,
            "mime_type": mime,
            "size": len(data),
            "chunks": len(chunks),
            **({"width": width} if width else {}),
            **({"height": height} if height else {}),
        }
        if self.objects.exists(f"{self._dir(file_id)}/meta.json"):
            return ref
        meta = {
            "id": file_id,
            "name": name,
            "pages": 0,
            "size": len(data),
            "mime": mime,
            "kind": "blob",
            "chunks": len(chunks),
        }
        files = {f"blob/{n:06d}.bin": chunk for n, chunk in enumerate(chunks, start=1)}
        self._publish(file_id, meta, files)
        return ref

    def get_blob(self, file_id: str) -> bytes:
        """The bytes of a file stored with `put_blob`.

        Raises:
            AttachmentError: unknown id, or not a stored file.
        """
        meta = json.loads(self.objects.get_bytes(f"{self.info(file_id).id}/meta.json"))
        if meta.get("kind") != "blob":
            raise AttachmentError(f"attachment {file_id!r} is a parsed document, not a file")
        chunks = int(meta.get("chunks", 0))
        return b"".join(
            self.objects.get_bytes(f"{file_id}/blob/{n:06d}.bin") for n in range(1, chunks + 1)
        )


def store_result_attachments(
    attachments: Sequence[Attachment], store: str | Path | Store | AttachmentStore | None = None
) -> list[dict[str, Any]]:
    """Store files a handler returned in its `ToolResult`; their refs go into history."""
    target = open_store(store)
    return [target.put_blob(a.data, a.name, a.mime_type, a.width, a.height) for a in attachments]


# -- reading ---------------------------------------------------------------------------------


def _read(path_or_bytes: str | Path | bytes, name: str | None) -> tuple[bytes, str]:
    if isinstance(path_or_bytes, bytes | bytearray):
        data = bytes(path_or_bytes)
        if len(data) > MAX_BYTES:
            raise _too_big(name or "the attachment", len(data))
        return data, name or ""
    path = Path(path_or_bytes).expanduser()
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise AttachmentError(f"file {str(path)!r} not found; check the path") from None
    if not path.is_file():
        raise AttachmentError(f"{str(path)!r} is not a file; attach files one at a time")
    if size > MAX_BYTES:
        raise _too_big(path.name, size)
    data = path.read_bytes()
    if len(data) > MAX_BYTES:  # it grew after the stat
        raise _too_big(path.name, len(data))
    return data, name or path.name


def _too_big(name: str, size: int) -> AttachmentError:
    return AttachmentError(
        f"{name!r} is {size / 1024 / 1024:.1f} MB; attachments are limited to 15 MB: split the "
        "file or attach an excerpt"
    )
