"""The PostgreSQL backend of `sql_query`: a cursor in a read-only transaction, rolled back.

The role must not be able to write files or run programs (see the tool's docstring).

```python
run_postgres("postgresql://agent_ro:pw@db.internal/shop", "SELECT * FROM orders", 100, 10_000)
```
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from toren.errors import SqlQueryError
from toren.worker._redact import redactor
from toren.worker.tools._sql_query import _rows

__all__ = ["CONNECT_TIMEOUT_S", "run_postgres"]

CONNECT_TIMEOUT_S = 10
"""Seconds allowed to connect to PostgreSQL (libpq's `connect_timeout`)."""

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

_TOO_BIG = "toren: row over the limit, bytes: "
"""Marks the error the size check raises (as an integer cast of this text and the size)."""
_ROW_BYTES = "octet_length(record_out(toren_row.*)::text)"
"""A row's size as text (as it travels). `toren_row.*` in an argument is the whole row, even
where the query has a column named `toren_row` (a bare `toren_row` would be that column)."""
_CHECKED = (
    "SELECT toren_row.* FROM (\n{query}\n) AS toren_row WHERE CASE WHEN "
    f"{_ROW_BYTES} > {{limit}} THEN ('{_TOO_BIG}' || {_ROW_BYTES})::int = 0 ELSE true END"
)
"""The model's query with each row's size checked on the server, as PostgreSQL has no length
limit to set: a row bigger than the limit fails the query there, before libpq (which reads a
row whole) holds it. Only applied to a query PostgreSQL accepted alone as a cursor's query,
so its text is one complete query and the parentheses around it hold it whole."""

_FETCH_ROWS = 50
"""Rows per FETCH: small batches, so a result of huge rows never sits in memory at once."""


def run_postgres(url: str, query: str, limit: int, timeout_ms: int) -> dict[str, Any]:
    """Run `query` read-only on the database at `url`; return the collected rows.

    Raises:
        SqlQueryError: psycopg is missing, the URL is invalid or unreachable, the role may
            write files or run programs, or PostgreSQL refused or failed the query. Neither
            the URL nor its password appears in the message.
    """
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise SqlQueryError(
            "sql_query needs psycopg for PostgreSQL; install it with pip install 'toren[sql]'"
        ) from None
    # Neither the URL nor its password (psycopg's parse reads `key=value` conninfo strings too)
    # may reach the error text, which lands in history.
    try:
        password = str(conninfo_to_dict(url).get("password") or "")
    except psycopg.Error as err:
        raise SqlQueryError(
            redactor([url]).text(f"SQL_DATABASE_URL is not a valid PostgreSQL URL: {err}")
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
            redactor([url, password]).text(f"cannot connect to PostgreSQL: {_rows.describe(err)}")
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
            cursor.execute(_checked(conn, query))
            batches = iter(lambda: cursor.fetchmany(_FETCH_ROWS), [])
            columns = [c.name for c in cursor.description or ()]
            return _rows.collect(columns, itertools.chain.from_iterable(batches), limit)
    except psycopg.Error as err:
        raise SqlQueryError(redactor([url, password]).text(_postgres_message(err))) from None
    finally:
        # A broken connection cannot roll back, but the server does so when it closes.
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        conn.close()


def _checked(conn: Any, query: str) -> str:
    """`query` wrapped in the row size check, once PostgreSQL accepted it alone.

    Raises:
        psycopg.Error: PostgreSQL refused the query itself (not a query, a syntax error...).
    """
    # Declaring a cursor plans the query without running it.
    candidates = [query]
    if ";" in query:
        # `SELECT 1; -- done` is one query, but not inside parentheses: without the `;` and
        # what follows, when that is only blanks and line comments (never `SELECT 1; DELETE`).
        at = query.rindex(";")
        rest = [line.strip() for line in query[at + 1 :].split("\n")]
        if all(not line or line.startswith("--") for line in rest):
            candidates.append(query[:at])
    import psycopg

    failure: psycopg.Error | None = None
    for candidate in candidates:
        checked = _CHECKED.format(query=candidate, limit=_rows.MAX_VALUE_BYTES)
        try:
            # A savepoint: a refused candidate leaves the read-only transaction usable.
            with conn.transaction():
                # Named as the real one: refusals quote `DECLARE "toren_sql_query" ...`.
                with conn.cursor(name=_CURSOR, scrollable=False) as alone:
                    alone.execute(candidate)
                with conn.cursor(name=_CURSOR + "_checked", scrollable=False) as wrapped:
                    wrapped.execute(checked)
        except psycopg.Error as err:
            failure = failure or err  # the query's own refusal is the one the model reads
            continue
        return checked
    assert failure is not None
    raise failure


def _postgres_message(err: Any) -> str:
    text = _without_declare(_rows.describe(err))
    sqlstate = getattr(err, "sqlstate", None)
    if _TOO_BIG in text:
        size = text.split(_TOO_BIG, 1)[1].split('"', 1)[0]
        return _rows.too_big("PostgreSQL", f"a row of {int(size):,} bytes is", "row")
    if sqlstate is None:
        return f"PostgreSQL client error: {text}"
    if "multiple commands" in text:
        return _rows.one_statement(text)
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
        return f"PostgreSQL refused the query: {text} ({_rows.READ_ONLY_HINT})"
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
