"""A workspace directory as the host reads it: every entry without following links, and hashes.

```python
for relative, st, link in entries(path):       # dirs, files, links (and FIFOs, sockets)
    ...
hash_file(path / relative)                      # sha256 hex, never through a symlink
```
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["entries", "give_owner", "hash_file"]

_CHUNK = 1024 * 1024


def entries(root: Path) -> Iterator[tuple[str, os.stat_result, str | None]]:
    """(relative path, lstat, symlink target or None) of every dir, file and link under root.

    Symlinks are never followed; sockets, FIFOs and devices are yielded too (callers skip them).
    A directory or file the sandbox made unreadable or unwritable to its owner (`chmod 000`)
    gets its owner's permissions back, else a worker not running as root could neither store
    nor roll back that copy (versions keep no mode but the executable bit).
    """
    with contextlib.suppress(OSError):
        give_owner(root, os.lstat(root), 0o700)
    stack = [""]
    while stack:
        folder = stack.pop()
        try:
            items = list(os.scandir(root / folder if folder else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for item in sorted(items, key=lambda i: i.name):
            relative = f"{folder}/{item.name}" if folder else item.name
            if not folder and item.name.startswith(".toren-restore-"):
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                yield relative, st, os.readlink(item.path)
            elif stat.S_ISDIR(st.st_mode):
                yield relative, st, None
                give_owner(Path(item.path), st, 0o700)
                stack.append(relative)
            else:
                if stat.S_ISREG(st.st_mode) and give_owner(Path(item.path), st, 0o600):
                    st = os.lstat(item.path)
                yield relative, st, None


def give_owner(path: Path, st: os.stat_result, bits: int) -> bool:
    """Add `bits` to `path`'s owner permissions when some are missing; return whether it did."""
    if st.st_mode & bits == bits:
        return False
    os.chmod(path, stat.S_IMODE(st.st_mode) | bits)  # never a link: `st` is its lstat
    return True


def hash_file(path: Path) -> str:
    """The sha256 of the file at `path` (never through a symlink), in hex."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
