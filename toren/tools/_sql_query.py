r"""The `sql_query` built-in: one read-only SQL query against SQLite or PostgreSQL.

```yaml
# agent.yaml
builtin_tools: [sql_query]   # the worker then requires SQL_DATABASE_URL, e.g.
                             #   sqlite:///data/shop.db  (relative)  sqlite:////srv/shop.db
                             #   postgresql://agent_ro:pw@db.internal:5432/shop
                             # optional: SQL_STATEMENT_TIMEOUT_MS (default 10000, at most 25000)
```

The model calls `sql_query {"query": "SELECT id, total FROM orders", "limit": 20}` and gets
`{"rowCount": 20, "truncated": true, "rows": [{"id": 1, "total": "149.00"}, ...]}`.

Read-only is enforced by the database, not by reading the SQL:

- SQLite opens the file with `mode=ro` and `PRAGMA query_only=ON`, allows no attached
  databases, and an authorizer denies every action but reading (so `ATTACH`, `VACUUM INTO`,
  pragma writes and DDL are refused while the statement is compiled).
- PostgreSQL runs the query as a server-side cursor (`DECLARE ... CURSOR FOR <query>`, sent
  through the extended protocol: exactly one statement, and the grammar accepts only a query
  there) in `BEGIN READ ONLY` (after `SET default_transaction_read_only = on`) with
  `SET LOCAL statement_timeout`, and always rolls back. Superusers, and members of
  `pg_write_server_files` or `pg_execute_server_program`, are refused: they can write files or
  run programs (`COPY ... TO PROGRAM`, `lo_export`) even in a read-only transaction. Use a role
  with `SELECT`-only grants; that is the real boundary (extensions such as dblink can reach
  other sessions, and a role may cancel or terminate its own other sessions).

Connections are opened per call and closed: nothing to leak across worker restarts. Results
hold at most `limit` rows and stay under 256 KB (rows are dropped, with a `note`), far below
Temporal's 2 MB payload limit. Values JSON cannot hold (Decimal, datetime, bytes, UUID) are
strings; bytes as hex with a `\x` prefix, as PostgreSQL prints them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from toren._tool import Tool, ToolContext, Variable, define_tool
from toren.errors import SqlQueryError

if TYPE_CHECKING:
    from toren._config import AgentConfig

__all__ = [
    "RESULT_BYTES",
    "SqlQueryError",
    "SqlQueryInput",
    "run_query",
    "tools",
]

TOOL_TIMEOUT_MS = 30_000
"""The tool's own timeout: a slower call returns `tool sql_query timed out` to the model."""

DEFAULT_STATEMENT_TIMEOUT_MS = 10_000
"""Per-query timeout unless `SQL_STATEMENT_TIMEOUT_MS` says otherwise."""

MAX_STATEMENT_TIMEOUT_MS = TOOL_TIMEOUT_MS - 5_000
"""The statement timeout's ceiling: connecting and fetching must fit in the tool's timeout."""

CONNECT_TIMEOUT_S = 10
"""Seconds allowed to connect to PostgreSQL (libpq's `connect_timeout`)."""

RESULT_BYTES = 256 * 1024
"""Upper bound of the JSON result; rows beyond it are dropped with a `note`."""

_ENVELOPE_BYTES = 256
"""Room kept for `rowCount`, `truncated` and `note` around the rows."""

_SUPPORTED_URLS = "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://..."

_READ_ONLY_HINT = "sql_query is read-only: send a single SELECT (or WITH ... SELECT)"


class SqlQueryInput(BaseModel):
    """Arguments of `sql_query`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        pattern=r"\S",
        description=(
            "Exactly one read-only query: SELECT, WITH ... SELECT or VALUES. Writes, DDL, "
            "other statements and multiple statements are refused."
        ),
    )
    limit: int = Field(
        100, ge=1, le=500, description="Most rows to return (1-500); `truncated` says if more."
    )


def run_query(args: SqlQueryInput, ctx: ToolContext) -> dict[str, Any]:
    """Run `args.query` read-only against `ctx.env["SQL_DATABASE_URL"]`.

    A sync handler on purpose: the runtime runs it in a thread, so blocking database calls
    never stall the worker's event loop.

    Args:
        args: The validated query and row limit.
        ctx: The call's context; `SQL_DATABASE_URL` and the optional
            `SQL_STATEMENT_TIMEOUT_MS` come from `ctx.env`.

    Returns:
        `{"rowCount": n, "truncated": bool, "rows": [{column: value}]}`, plus a `note` when
        rows were dropped to stay under 256 KB.

    Raises:
        SqlQueryError: The URL is unusable, the statement is not a single read, or the database
            reported an error (its message is included).
    """
    url = ctx.env.get("SQL_DATABASE_URL", "").strip()
    if not url:
        raise SqlQueryError(
            "'SQL_DATABASE_URL' is empty; set it in the worker's environment to " + _SUPPORTED_URLS
        )
    timeout_ms = _statement_timeout(ctx.env)
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        return _run_sqlite(_sqlite_path(url), args.query, args.limit, timeout_ms)
    if scheme in ("postgresql", "postgres"):
        return _run_postgres(url, args.query, args.limit, timeout_ms)
    raise SqlQueryError(
        f"SQL_DATABASE_URL has the unsupported scheme {scheme + '://'!r}; use {_SUPPORTED_URLS}"
    )


def _statement_timeout(env: Mapping[str, str]) -> int:
    raw = env.get("SQL_STATEMENT_TIMEOUT_MS") or ""
    if not raw.strip():
        return DEFAULT_STATEMENT_TIMEOUT_MS
    try:
        value = int(raw)
    except ValueError:
        raise SqlQueryError(
            f"SQL_STATEMENT_TIMEOUT_MS must be a whole number of milliseconds, got {raw!r}"
        ) from None
    if value < 1:
        raise SqlQueryError(f"SQL_STATEMENT_TIMEOUT_MS must be positive, got {raw!r}")
    return min(value, MAX_STATEMENT_TIMEOUT_MS)


# -- results --------------------------------------------------------------------------------


class _Collector:
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


def _describe(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text if len(text) <= 1500 else text[:1500] + " ..."


# -- SQLite ---------------------------------------------------------------------------------

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


def _sqlite_path(url: str) -> Path:
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


def _run_sqlite(path: Path, query: str, limit: int, timeout_ms: int) -> dict[str, Any]:
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
            collector = _Collector([d[0] for d in cursor.description], limit)
            for row in iter(cursor.fetchone, None):
                if not collector.add(row):
                    break
            return collector.result()
        except sqlite3.ProgrammingError as err:
            if "one statement" in str(err):
                raise SqlQueryError(
                    f"only one statement per call ({err}); send each query in its own call"
                ) from None
            raise SqlQueryError(f"SQLite refused the query: {_describe(err)}") from None
        except sqlite3.Error as err:
            if denied:
                # Name the statement's own action (CREATE TRIGGER 'x') over the schema-table
                # write SQLite checks along the way.
                named = [d for d in denied if not d.startswith("changing the schema")] or denied
                raise SqlQueryError(
                    f"SQLite refused the query: {named[0]} is not allowed; {_READ_ONLY_HINT}"
                ) from None
            if "interrupted" in str(err):
                raise SqlQueryError(
                    f"the query was cancelled after the {timeout_ms} ms statement timeout; "
                    "narrow it (WHERE, LIMIT) or aggregate"
                ) from None
            raise SqlQueryError(f"SQLite error: {_describe(err)}") from None
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


# -- PostgreSQL -----------------------------------------------------------------------------

_PRIVILEGE_CHECK = """
SELECT current_user::text,
       EXISTS (SELECT 1 FROM pg_roles WHERE rolsuper AND pg_has_role(current_user, oid, 'MEMBER')),
       pg_has_role(current_user, 'pg_write_server_files', 'MEMBER'),
       pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER')
"""


_CURSOR = "toren_sql_query"
_DECLARE = f'DECLARE "{_CURSOR}" NO SCROLL CURSOR FOR '
"""What psycopg puts before the model's query; PostgreSQL's grammar accepts only a query after
it (SELECT, VALUES, TABLE, WITH ... SELECT without data-modifying parts)."""

_FETCH_ROWS = 50
"""Rows per FETCH: small batches, so a result of huge rows never sits in memory at once."""


def _run_postgres(url: str, query: str, limit: int, timeout_ms: int) -> dict[str, Any]:
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise SqlQueryError(
            "sql_query needs psycopg for PostgreSQL; install it with pip install 'toren[sql]'"
        ) from None
    try:
        password = str(conninfo_to_dict(url).get("password") or "")
    except psycopg.Error as err:
        raise SqlQueryError(
            _scrub(f"SQL_DATABASE_URL is not a valid PostgreSQL URL: {err}", url, "")
        ) from None

    try:
        conn = psycopg.connect(
            url,
            autocommit=True,  # transactions are ours, explicit: BEGIN READ ONLY ... ROLLBACK
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="toren sql_query",
        )
    except psycopg.Error as err:
        raise SqlQueryError(
            _scrub(f"cannot connect to PostgreSQL: {_describe(err)}", url, password)
        ) from None
    try:
        conn.execute("SET default_transaction_read_only = on")
        conn.execute("BEGIN READ ONLY")
        conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
        # This query also takes the transaction's snapshot, after which PostgreSQL refuses
        # `SET TRANSACTION READ WRITE` and set_config('transaction_read_only', 'off').
        row = conn.execute(_PRIVILEGE_CHECK).fetchone()
        if row is not None and any(row[1:]):
            raise SqlQueryError(
                f"SQL_DATABASE_URL connects as {row[0]!r}, a superuser or a member of "
                "pg_write_server_files/pg_execute_server_program: such a role can write files "
                "and run programs even in a read-only transaction, so sql_query refuses it. "
                "Connect as a role with SELECT-only grants, e.g. CREATE ROLE agent_ro LOGIN "
                "PASSWORD '...'; GRANT SELECT ON ALL TABLES IN SCHEMA public TO agent_ro;"
            )
        # A server-side cursor: psycopg sends `DECLARE ... CURSOR FOR <query>` through the
        # extended protocol, so PostgreSQL accepts exactly one statement, and only a query:
        # ANALYZE, CLUSTER, LOCK, COPY, SET and friends (which a read-only transaction lets
        # an owner run) are syntax errors there. With no params, % and {} are sent as is.
        with conn.cursor(name=_CURSOR, scrollable=False) as cursor:
            cursor.execute(query)
            collector = _Collector([c.name for c in cursor.description or ()], limit)
            while batch := cursor.fetchmany(_FETCH_ROWS):
                if not all(collector.add(values) for values in batch):
                    break
            return collector.result()
    except psycopg.Error as err:
        raise SqlQueryError(_scrub(_postgres_message(err), url, password)) from None
    finally:
        # A broken connection cannot roll back, but the server does so when it closes.
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        conn.close()


def _postgres_message(err: Any) -> str:
    text = _without_declare(_describe(err))
    sqlstate = getattr(err, "sqlstate", None)
    if sqlstate is None:
        return f"PostgreSQL client error: {text}"
    if "multiple commands" in text:
        return f"only one statement per call ({text}); send each query in its own call"
    position = getattr(getattr(err, "diag", None), "statement_position", None)
    if sqlstate == "42601" and position == str(len(_DECLARE) + 1):
        # The grammar rejected the very first word: the statement is not a query.
        return (
            f"sql_query runs only queries (SELECT, WITH ... SELECT, VALUES, TABLE); "
            f"PostgreSQL said: {text}"
        )
    # read_only_sql_transaction, active_sql_transaction (SET TRANSACTION READ WRITE too late),
    # feature_not_supported (data-modifying WITH in a cursor)
    if sqlstate in ("25006", "25001", "0A000"):
        return f"PostgreSQL refused the query: {text} ({_READ_ONLY_HINT})"
    if sqlstate == "57014":  # query_canceled: the statement timeout fired
        return f"PostgreSQL cancelled the query: {text}; narrow it (WHERE, LIMIT) or aggregate"
    return f"PostgreSQL error: {text}"


def _without_declare(text: str) -> str:
    # Error excerpts quote `DECLARE ... CURSOR FOR <query>` (or its tail after "..."); show the
    # model its own query, with the caret line under it shifted by as much.
    lines = text.split("\n")
    marker = " CURSOR FOR "
    for i, line in enumerate(lines):
        if not line.startswith("LINE ") or marker not in line:
            continue
        start = line.index(": ") + 2
        if not (line.startswith(_DECLARE, start) or line.startswith("...", start)):
            continue
        cut = line.index(marker) + len(marker)
        lines[i] = line[:start] + line[cut:]
        if i + 1 < len(lines) and lines[i + 1].strip() == "^":
            caret = lines[i + 1]
            lines[i + 1] = caret[:start] + caret[cut:]
    return "\n".join(lines)


def _scrub(text: str, url: str, password: str) -> str:
    # Error text lands in Temporal's history; neither the URL nor its password may.
    for secret in (url, password):
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def tools(config: AgentConfig, name: str) -> list[Tool]:
    """The `sql_query` tool (the registry's entry point; `config` holds no options for it)."""
    return [
        define_tool(
            name="sql_query",
            description=(
                "Run one read-only SQL query (SELECT / WITH ... SELECT) against the database "
                "and get rows back as JSON objects. Writes, DDL and multiple statements are "
                "refused. Inspect the schema first: SQLite `SELECT sql FROM sqlite_master`, "
                "PostgreSQL `SELECT table_name, column_name, data_type FROM "
                "information_schema.columns WHERE table_schema = 'public'`."
            ),
            input=SqlQueryInput,
            effects="none",
            # Reading twice is harmless: nothing to key.
            idempotency="none",
            approval="never",
            timeout_ms=TOOL_TIMEOUT_MS,
            max_attempts=3,
            # Optional and not secret: resolved into ctx.env from the worker's environment.
            variables=[Variable("SQL_STATEMENT_TIMEOUT_MS", type="text", required=False)],
            handler=run_query,
        )
    ]
