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

This module is the tool; `_sqlite` and `_postgres` are the backends, `_rows` the bounded result
both build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toren.agent._context import ToolContext, Variable
from toren.errors import SqlQueryError
from toren.worker.tools._read_only import read_only_tool
from toren.worker.tools._sql_query._postgres import run_postgres
from toren.worker.tools._sql_query._rows import RESULT_BYTES
from toren.worker.tools._sql_query._sqlite import run_sqlite, sqlite_path

__all__ = [
    "RESULT_BYTES",
    "SqlQueryError",
    "SqlQueryInput",
    "run_query",
    "tool",
]

TOOL_TIMEOUT_MS = 30_000
"""The tool's own timeout: a slower call returns `tool sql_query timed out` to the model."""

DEFAULT_STATEMENT_TIMEOUT_MS = 10_000
"""Per-query timeout unless `SQL_STATEMENT_TIMEOUT_MS` says otherwise."""

MAX_STATEMENT_TIMEOUT_MS = TOOL_TIMEOUT_MS - 5_000
"""The statement timeout's ceiling: connecting and fetching must fit in the tool's timeout."""

_SUPPORTED_URLS = "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://..."


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
        return run_sqlite(sqlite_path(url), args.query, args.limit, timeout_ms)
    if scheme in ("postgresql", "postgres"):
        return run_postgres(url, args.query, args.limit, timeout_ms)
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


tool = read_only_tool(
    name="sql_query",
    description=(
        "Run one read-only SQL query (SELECT / WITH ... SELECT) against the database "
        "and get rows back as JSON objects. Writes, DDL and multiple statements are "
        "refused. Inspect the schema first: SQLite `SELECT sql FROM sqlite_master`, "
        "PostgreSQL `SELECT table_name, column_name, data_type FROM "
        "information_schema.columns WHERE table_schema = 'public'`."
    ),
    input=SqlQueryInput,
    timeout_ms=TOOL_TIMEOUT_MS,
    # Optional and not secret: resolved into ctx.env from the worker's environment.
    variables=[Variable("SQL_STATEMENT_TIMEOUT_MS", type="text", required=False)],
    handler=run_query,
)
"""The `sql_query` tool: its contract is fixed, agent.yaml holds no options for it."""
