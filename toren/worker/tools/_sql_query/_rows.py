"""The rows a query returns, as the model reads them, and what either backend says when it refuses.

```python
collect(["id", "total"], iter(cursor.fetchone, None), limit=100)
# {"rowCount": n, "truncated": bool, "rows": [...], "note"?: str}
```

Rows become JSON objects, bounded in count and bytes; no row past the bound is fetched.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

__all__ = [
    "MAX_VALUE_BYTES",
    "READ_ONLY_HINT",
    "RESULT_BYTES",
    "Collector",
    "collect",
    "describe",
    "one_statement",
    "too_big",
]

RESULT_BYTES = 256 * 1024
"""Upper bound of the JSON result; rows beyond it are dropped with a `note`."""

MAX_VALUE_BYTES = 1024 * 1024
"""Largest value (SQLite) or row (PostgreSQL) a query may produce: the database refuses
bigger ones before they reach the worker. Nothing larger fits in a result anyway; without it
`SELECT zeroblob(500000000)` took a worker from 123 MB to 2.9 GB before the cut."""

VALUE_HINT = (
    "select a part (substr(col, 1, 2000)) or a measure (length(col)) instead of the whole value"
)
"""Said when a value or row is over `MAX_VALUE_BYTES`."""

_ENVELOPE_BYTES = 256
"""Room kept for `rowCount`, `truncated` and `note` around the rows."""

READ_ONLY_HINT = "sql_query is read-only: send a single SELECT (or WITH ... SELECT)"
"""Said after every refusal of a write, by either backend."""


class Collector:
    """Gathers rows up to `limit` and the byte budget, so memory stays bounded too."""

    def __init__(self, columns: Sequence[str], limit: int) -> None:
        self.columns = _unique(columns)
        self.limit = limit
        self.rows: list[dict[str, Any]] = []
        self.truncated = False
        self.cut = False
        self.used = 0

    def add(self, row: Sequence[Any]) -> bool:
        """Keep `row` if it fits; return False once no more rows are wanted."""
        if len(self.rows) >= self.limit:
            self.truncated = True
            return False
        item = {c: _jsonable(v) for c, v in zip(self.columns, row, strict=False)}
        # Measured as the runtime encodes it (json.dumps, UTF-8, non-ASCII kept) plus ", ".
        size = len(json.dumps(item, ensure_ascii=False).encode()) + 2
        if self.used + size > RESULT_BYTES - _ENVELOPE_BYTES:
            self.truncated = self.cut = True
            return False
        self.rows.append(item)
        self.used += size
        return True

    def result(self) -> dict[str, Any]:
        """The tool's reply: the rows kept, whether any were left out, and why."""
        out: dict[str, Any] = {
            "rowCount": len(self.rows),
            "truncated": self.truncated,
            "rows": self.rows,
        }
        if self.cut:
            note = f"cut to {len(self.rows)} rows to stay under 256 KB"
            if not self.rows:
                note += (
                    "; the first row alone is larger: select fewer columns or shorten long "
                    "values (e.g. substr(col, 1, 2000))"
                )
            out["note"] = note
        return out


def collect(columns: Sequence[str], rows: Iterable[Sequence[Any]], limit: int) -> dict[str, Any]:
    """The tool's reply for `rows`, read only as far as `limit` and the byte budget allow."""
    collector = Collector(columns, limit)
    for row in rows:
        if not collector.add(row):
            break
    return collector.result()


def one_statement(text: str) -> str:
    """Said when the database saw more than one statement (`text` is its own complaint)."""
    return f"only one statement per call ({text}); send each query in its own call"


def too_big(backend: str, what: str, per: str) -> str:
    """Said when `what` is over `MAX_VALUE_BYTES` per `per` (a row, a value)."""
    return (
        f"{backend} refused the query: {what} over sql_query's {MAX_VALUE_BYTES:,}-byte limit "
        f"per {per}; {VALUE_HINT}"
    )


def _unique(columns: Sequence[str]) -> list[str]:
    # `SELECT a.id, b.id` would otherwise lose a value when the row becomes an object.
    seen: set[str] = set()
    out: list[str] = []
    for name in columns:
        key, n = name, 1
        while key in seen:
            n += 1
            key = f"{name}_{n}"
        seen.add(key)
        out.append(key)
    return out


def _jsonable(value: Any) -> Any:
    """A JSON-safe form of a database value: strings for what JSON has no type for."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        # NaN and Infinity are not JSON; json.dumps would emit them anyway.
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dt.timedelta | uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def describe(err: BaseException) -> str:
    """A database error's text for the model, cut to 1,500 characters."""
    text = str(err).strip() or type(err).__name__
    return text if len(text) <= 1500 else text[:1500] + " ..."
