"""The SQLite backend of `sql_query`: the file opened read-only, an authorizer for reads only.

The authorizer denies every action but reading, and names the denied one for the model.

```python
run_sqlite(sqlite_path("sqlite:///data/shop.db"), "SELECT * FROM orders", 100, 10_000)
```
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toren.errors import SqlQueryError
from toren.worker.tools._sql_query import _rows

__all__ = ["run_sqlite", "sqlite_path"]

# Authorizer action codes, named for error messages.
_SQLITE_ACTIONS = {
    getattr(sqlite3, name): name.removeprefix("SQLITE_").replace("_", " ")
    for name in (
        "SQLITE_CREATE_INDEX",
        "SQLITE_CREATE_TABLE",
        "SQLITE_CREATE_TEMP_INDEX",
        "SQLITE_CREATE_TEMP_TABLE",
        "SQLITE_CREATE_TEMP_TRIGGER",
        "SQLITE_CREATE_TEMP_VIEW",
        "SQLITE_CREATE_TRIGGER",
        "SQLITE_CREATE_VIEW",
        "SQLITE_DELETE",
        "SQLITE_DROP_INDEX",
        "SQLITE_DROP_TABLE",
        "SQLITE_DROP_TEMP_INDEX",
        "SQLITE_DROP_TEMP_TABLE",
        "SQLITE_DROP_TEMP_TRIGGER",
        "SQLITE_DROP_TEMP_VIEW",
        "SQLITE_DROP_TRIGGER",
        "SQLITE_DROP_VIEW",
        "SQLITE_INSERT",
        "SQLITE_PRAGMA",
        "SQLITE_TRANSACTION",
        "SQLITE_UPDATE",
        "SQLITE_ATTACH",
        "SQLITE_DETACH",
        "SQLITE_ALTER_TABLE",
        "SQLITE_REINDEX",
        "SQLITE_ANALYZE",
        "SQLITE_CREATE_VTABLE",
        "SQLITE_DROP_VTABLE",
        "SQLITE_SAVEPOINT",
    )
    if hasattr(sqlite3, name)
}

_SQLITE_NAME_SECOND = {sqlite3.SQLITE_ALTER_TABLE, sqlite3.SQLITE_SAVEPOINT}

_SQLITE_READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}

# Pragmas that only describe the schema, whatever their argument (a table or index name).
_SQLITE_READ_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "database_list",
}

_SQLITE_SCHEMA = {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}

# Functions refused even though extension loading is off by default: belt and braces.
_SQLITE_DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer"}


def sqlite_path(url: str) -> Path:
    """The database file a `sqlite:///` URL names; it must exist.

    Raises:
        SqlQueryError: The URL is not a SQLite file URL, or names no existing file.
    """
    # sqlite:///rel/path.db -> rel/path.db ; sqlite:////abs/path.db -> /abs/path.db
    if not url.lower().startswith("sqlite:///"):
        raise SqlQueryError(
            f"SQL_DATABASE_URL {url!r} is not a SQLite file URL; use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    raw = url[len("sqlite:///") :].split("?", 1)[0]
    if not raw:
        raise SqlQueryError("SQL_DATABASE_URL names no SQLite file; use sqlite:///path/to.db")
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        raise SqlQueryError(
            f"SQLite database {str(path)!r} does not exist (from SQL_DATABASE_URL); "
            "check the path (sqlite:/// + relative path, sqlite://// + absolute path)"
        )
    return path


def run_sqlite(path: Path, query: str, limit: int, timeout_ms: int) -> dict[str, Any]:
    """Run `query` read-only against the file at `path`; return the collected rows.

    Raises:
        SqlQueryError: The file cannot be opened, or SQLite refused or failed the query.
    """
    # mode=ro: SQLite itself refuses writes to the file, whatever the statement.
    try:
        conn = sqlite3.connect(
            path.as_uri() + "?mode=ro", uri=True, isolation_level=None, timeout=5.0
        )
    except sqlite3.Error as err:
        raise SqlQueryError(f"cannot open SQLite database {str(path)!r}: {err}") from None
    denied: list[str] = []
    try:
        conn.execute("PRAGMA query_only=ON")
        # No attached databases at all: ATTACH of a writable file (and VACUUM INTO, which
        # attaches its target) fails even before the authorizer is asked.
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        # No string or blob past MAX_VALUE_BYTES is ever built in the worker's memory.
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _rows.MAX_VALUE_BYTES)
        conn.set_authorizer(_sqlite_authorizer(denied))
        deadline = time.monotonic() + timeout_ms / 1000
        # A runaway query (a huge cross join) is interrupted at the statement timeout.
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = conn.execute(query)
            if cursor.description is None:
                raise SqlQueryError(
                    "the statement returned no rows to read; sql_query runs one query that "
                    "returns rows (SELECT, WITH ... SELECT, VALUES)"
                )
            columns = [d[0] for d in cursor.description]
            return _rows.collect(columns, iter(cursor.fetchone, None), limit)
        except sqlite3.ProgrammingError as err:
            if "one statement" in str(err):
                raise SqlQueryError(_rows.one_statement(str(err))) from None
            raise SqlQueryError(f"SQLite refused the query: {_rows.describe(err)}") from None
        except sqlite3.Error as err:
            if denied:
                # Name the statement's own action (CREATE TRIGGER 'x') over the schema-table
                # write SQLite checks along the way.
                named = [d for d in denied if not d.startswith("changing the schema")] or denied
                raise SqlQueryError(
                    f"SQLite refused the query: {named[0]} is not allowed; {_rows.READ_ONLY_HINT}"
                ) from None
            if "too big" in str(err):
                per = "value (SQLITE_LIMIT_LENGTH)"
                raise SqlQueryError(_rows.too_big("SQLite", "a string or blob", per)) from None
            if "interrupted" in str(err):
                raise SqlQueryError(
                    f"the query was cancelled after the {timeout_ms} ms statement timeout; "
                    "narrow it (WHERE, LIMIT) or aggregate"
                ) from None
            raise SqlQueryError(f"SQLite error: {_rows.describe(err)}") from None
    finally:
        conn.close()


def _sqlite_authorizer(denied: list[str]) -> Callable[..., int]:
    def authorize(
        action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        if action in _SQLITE_READS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in _SQLITE_DENIED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            denied.append(f"the function {arg2!r}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SQLITE_READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        what = _SQLITE_ACTIONS.get(action, f"action {action}")
        # ALTER TABLE and SAVEPOINT put the database or the operation first, the name second.
        names = (arg2, arg1) if action in _SQLITE_NAME_SECOND else (arg1, arg2)
        target = next((a for a in names if a), None)
        text = f"{what} {target!r}" if target else what
        # DDL shows up first as a write to the schema table; say what that means.
        denied.append(f"changing the schema ({text})" if target in _SQLITE_SCHEMA else text)
        return sqlite3.SQLITE_DENY

    return authorize
