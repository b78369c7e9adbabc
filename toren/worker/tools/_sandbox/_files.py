r"""The file tools' safe path handling in a run's workspace directory (`toren.store._workspace`).

```python
ws = workspace_dir(workspace_root(os.environ), "run-1")   # <root>/run-1, created
write_file(ws, "src/a.py", "print(1)\n")                   # {"path": "src/a.py", "bytes": 9}
read_file(ws, "src/a.py")                                  # "     1\tprint(1)"
```

Paths are checked twice: first by resolving them (symlinks included) and requiring the result to
lie inside the workspace, which gives the model a clear message; then the resolved path is
opened one component at a time with `O_NOFOLLOW` relative to the workspace's directory fd, so a
symlink swapped in by a concurrent bash call between the check and the open cannot redirect the
write outside the workspace.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from toren.errors import SandboxError

__all__ = [
    "SandboxError",
    "edit_file",
    "read_file",
    "write_file",
]

MAX_LINE_CHARS = 2000
"""`read_file` cuts longer lines, so one minified line cannot flood the context."""
MAX_EDIT_BYTES = 20_000_000
"""`edit_file` reads the whole file; bigger files are for bash (`sed -i`)."""

_LINE_BYTES = MAX_LINE_CHARS * 4 + 1  # enough for MAX_LINE_CHARS UTF-8 characters and more
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the sandbox planted must not hang the worker; the fstat check
# right after refuses anything that is not a regular file.
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_file(workspace: Path, path: str, offset: int = 1, limit: int = 2000) -> str:
    """Return lines `offset`.. of `path` numbered like `cat -n` (at most `limit` of them).

    Raises:
        SandboxError: the path is outside the workspace, missing, binary or not a file.
    """
    parts = _resolve(workspace, path)
    shown = "/".join(parts)
    with (
        _open_file(workspace, parts, os.O_RDONLY, create=False) as fd,
        os.fdopen(os.dup(fd), "rb") as f,
    ):
        if b"\0" in f.read(8192):
            raise SandboxError(
                f"{shown!r} looks binary; inspect it with bash (e.g. `file`, `xxd | head`)"
            )
        f.seek(0)
        lines: list[str] = []
        number = 0
        more = False
        for number, (raw, dropped) in enumerate(_lines(f), 1):
            if number < offset:
                continue
            if len(lines) == limit:
                more = True
                break
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if dropped:
                line = f"{line[:MAX_LINE_CHARS]}… [line cut at {MAX_LINE_CHARS} chars]"
            elif len(line) > MAX_LINE_CHARS:
                line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS} chars cut]"
            lines.append(f"{number:6d}\t{line}")
    if not lines:
        if number == 0:
            return "(empty file)"
        raise SandboxError(
            f"offset {offset} is past the end of {shown!r}, which has {number} lines; "
            "pass a smaller offset"
        )
    if more:
        lines.append(f"… more lines follow; read on with offset={offset + limit}")
    return "\n".join(lines)


def write_file(workspace: Path, path: str, content: str) -> dict[str, Any]:
    """Write `content` to `path` (UTF-8), replacing it and creating missing parent directories.

    Raises:
        SandboxError: the path is outside the workspace or not a regular file.
    """
    parts = _resolve(workspace, path)
    data = content.encode("utf-8")
    with _open_file(workspace, parts, os.O_WRONLY | os.O_CREAT, create=True) as fd:
        # Truncate only after _open_file checked it is a regular file.
        os.ftruncate(fd, 0)
        _write_all(fd, data)
    return {"path": "/".join(parts), "bytes": len(data)}


def edit_file(
    workspace: Path, path: str, old_string: str, new_string: str, replace_all: bool = False
) -> dict[str, Any]:
    """Replace `old_string` by `new_string` in `path`: exactly once, or everywhere.

    Raises:
        SandboxError: `old_string` is empty, missing, or ambiguous without `replace_all`; or the
            path is outside the workspace, not a file, or not UTF-8.
    """
    if not old_string:
        raise SandboxError(
            "old_string is empty; give the exact text to replace (use write_file for new files)"
        )
    if old_string == new_string:
        raise SandboxError("old_string and new_string are identical; there is nothing to change")
    parts = _resolve(workspace, path)
    shown = "/".join(parts)
    with _open_file(workspace, parts, os.O_RDWR, create=False) as fd:
        size = os.fstat(fd).st_size
        if size > MAX_EDIT_BYTES:
            raise SandboxError(
                f"{shown!r} is {size} bytes, over edit_file's {MAX_EDIT_BYTES}; edit it with bash"
            )
        data = _read_all(fd)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SandboxError(f"{shown!r} is not UTF-8 text; edit it with bash") from None
        count = text.count(old_string)
        if count == 0:
            raise SandboxError(
                f"old_string not found in {shown!r}; read_file it and copy the text exactly "
                "(whitespace and indentation included)"
            )
        if count > 1 and not replace_all:
            raise SandboxError(
                f"old_string occurs {count} times in {shown!r}; include more surrounding lines "
                "to make it unique, or pass replace_all: true to replace every occurrence"
            )
        new = text.replace(old_string, new_string).encode("utf-8")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        _write_all(fd, new)
    return {"path": shown, "replacements": count}


def _resolve(workspace: Path, path: str) -> tuple[str, ...]:
    """The components of `path` inside `workspace`, symlinks resolved, or a SandboxError."""
    if not isinstance(path, str) or not path.strip():
        raise SandboxError("path is empty; give a path relative to the workspace, e.g. 'notes.md'")
    if "\0" in path:
        raise SandboxError(f"path {path!r} contains a NUL byte")
    if path.startswith("/"):
        relative = path.removeprefix("/workspace").lstrip("/") or "notes.md"
        raise SandboxError(
            f"path {path!r} is absolute; file tools take paths relative to the workspace "
            f"(which bash sees as /workspace), e.g. {relative!r}"
        )
    if os.path.normpath(path).split("/")[0] == "..":
        raise SandboxError(
            f"path {path!r} climbs out of the workspace with '..'; only files inside it are "
            "reachable"
        )
    target = Path(os.path.realpath(workspace / path))
    if not target.is_relative_to(workspace):
        # Never name the target: it would reveal the host's directory layout to the model.
        raise SandboxError(
            f"path {path!r} goes through a symlink that points outside the workspace; only "
            "files inside it are reachable (replace the symlink with a copy of what you need)"
        )
    parts = target.relative_to(workspace).parts
    if not parts:
        raise SandboxError(f"path {path!r} is the workspace directory itself; name a file in it")
    return parts


@contextlib.contextmanager
def _open_file(workspace: Path, parts: tuple[str, ...], flags: int, create: bool) -> Iterator[int]:
    """Open `parts` below `workspace` without following any symlink; yield a regular file's fd."""
    shown = "/".join(parts)
    try:
        with _open_dir(workspace, parts[:-1], create) as dir_fd:
            fd = os.open(parts[-1], flags | _FILE_FLAGS, 0o666, dir_fd=dir_fd)
    except OSError as err:
        raise _explain(err, shown) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SandboxError(f"{shown!r} is a directory; list it with bash (`ls {shown}`)")
        if not stat.S_ISREG(mode):
            raise SandboxError(f"{shown!r} is not a regular file (a FIFO, socket or device)")
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _open_dir(workspace: Path, parts: tuple[str, ...], create: bool) -> Iterator[int]:
    """Walk `parts` from `workspace` with O_NOFOLLOW, creating missing ones when `create`."""
    fd = os.open(workspace, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # a concurrent call made it first
                    os.mkdir(part, 0o777, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _explain(err: OSError, shown: str) -> SandboxError:
    if err.errno == errno.ENOENT:
        return SandboxError(f"{shown!r} does not exist (list the workspace with bash `ls`)")
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        # The realpath check passed, so a symlink appeared since, or a parent is a file.
        return SandboxError(
            f"{shown!r} passes through a symlink or a non-directory; use a plain path inside "
            "the workspace"
        )
    if err.errno == errno.EISDIR:
        return SandboxError(f"{shown!r} is a directory; list it with bash (`ls {shown}`)")
    if err.errno == errno.ENXIO:
        return SandboxError(f"{shown!r} is not a regular file (a FIFO, socket or device)")
    return SandboxError(f"cannot open {shown!r}: {err.strerror}")


def _lines(f: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """Yield each line, at most `_LINE_BYTES` of it, and how many bytes of it were skipped.

    Bounded reads, so a huge file without newlines cannot exhaust the worker's memory.
    """
    while line := f.readline(_LINE_BYTES):
        dropped = 0
        if not line.endswith(b"\n"):
            while rest := f.readline(1 << 16):
                if rest.endswith(b"\n"):
                    dropped += len(rest) - 1
                    break
                dropped += len(rest)
        yield line, dropped


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
