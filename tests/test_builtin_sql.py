"""sql_query against a real SQLite file and a real, throwaway PostgreSQL cluster.

Every write or escape attempt must come back as an error (or, for the few statements PostgreSQL
lets a read-only transaction run, have no lasting effect) and leave the data byte-for-byte the
same. The PostgreSQL tests need Debian's `postgresql` package (initdb, pg_ctl); they skip with a
reason when the binaries are absent.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from toren.agent._context import ToolContext
from toren.agent._tool import Tool
from toren.testing import free_port
from toren.worker.tools import _sql_query as sql_query
from toren.worker.tools._sql_query import RESULT_BYTES, SqlQueryError


def make_tool() -> Tool:
    return sql_query.tool


TOOL = make_tool()


def ctx(url: str, **env: str) -> ToolContext:
    return ToolContext(
        env={"SQL_DATABASE_URL": url, **env},
        idempotency_key="k",
        run_id="r",
        call_id="c",
        agent="a",
        tool="sql_query",
    )


async def query(url: str, sql: str, limit: int | None = None, **env: str) -> Any:
    args: dict[str, Any] = {"query": sql}
    if limit is not None:
        args["limit"] = limit
    return json.loads(await TOOL.invoke(args, ctx(url, **env)))


async def refused(url: str, sql: str, **env: str) -> str:
    with pytest.raises(SqlQueryError) as err:
        await query(url, sql, None, **env)
    return str(err.value)


def test_contract() -> None:
    assert TOOL.name == "sql_query"
    assert TOOL.effects == "none"
    assert TOOL.idempotency == "none"
    assert TOOL.approval == "never"
    assert TOOL.timeout_ms == 30_000
    assert TOOL.max_attempts == 3
    assert TOOL.schema["required"] == ["query"]
    assert TOOL.schema["properties"]["limit"]["maximum"] == 500


@pytest.mark.parametrize(
    "args",
    [
        {"query": ""},
        {"query": "   "},
        {"query": "SELECT 1", "limit": 0},
        {"query": "SELECT 1", "limit": 501},
        {"limit": 5},
        {"query": "SELECT 1", "extra": True},
    ],
)
async def test_invalid_arguments(args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        await TOOL.invoke(args, ctx("sqlite:///x.db"))


async def test_url_problems(tmp_path: Path) -> None:
    assert "'SQL_DATABASE_URL' is empty" in await refused("", "SELECT 1")
    assert "unsupported scheme 'mysql://'" in await refused("mysql://u@h/db", "SELECT 1")
    missing = await refused(f"sqlite:///{tmp_path}/nope.db", "SELECT 1")
    assert "does not exist" in missing and "nope.db" in missing
    assert "not a SQLite file URL" in await refused("sqlite://host/x.db", "SELECT 1")
    bad = await refused("sqlite:///x.db", "SELECT 1", SQL_STATEMENT_TIMEOUT_MS="soon")
    assert "SQL_STATEMENT_TIMEOUT_MS must be a whole number" in bad


# -- SQLite ---------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE orders (
            id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
            total REAL, note TEXT, receipt BLOB
        );
        CREATE INDEX orders_customer ON orders(customer_id);
        CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT);
        """
    )
    conn.executemany("INSERT INTO customers VALUES (?, ?)", [(1, "Ada"), (2, "Grace")])
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
        [(i, 1 + i % 2, i * 1.5, f"note {i}", bytes([i % 256, 255])) for i in range(1, 301)],
    )
    conn.executemany("INSERT INTO docs VALUES (?, ?)", [(i, "x" * 10_000) for i in range(1, 61)])
    conn.commit()
    conn.close()
    return path


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"  # absolute path -> sqlite:////tmp/...


def sqlite_state(path: Path) -> tuple[str, list[str], int]:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    conn = sqlite3.connect(path)
    count = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
    conn.close()
    return digest, sorted(os.listdir(path.parent)), count


async def test_sqlite_select(sqlite_db: Path) -> None:
    url = sqlite_url(sqlite_db)
    out = await query(url, "SELECT id, total, note, receipt FROM orders WHERE id <= 2 ORDER BY id")
    assert out == {
        "rowCount": 2,
        "truncated": False,
        "rows": [
            {"id": 1, "total": 1.5, "note": "note 1", "receipt": "\\x01ff"},
            {"id": 2, "total": 3.0, "note": "note 2", "receipt": "\\x02ff"},
        ],
    }
    # Duplicate column names stay apart; NULLs are null.
    join = (
        "SELECT c.id, o.id, NULL AS empty FROM customers c JOIN orders o "
        "ON o.customer_id = c.id ORDER BY o.id LIMIT 1"
    )
    out = await query(url, join)
    assert out["rows"] == [{"id": 2, "id_2": 1, "empty": None}]
    out = await query(url, "SELECT name FROM customers WHERE name LIKE 'A%'")
    assert out["rows"] == [{"name": "Ada"}]
    recursive = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) "
        "SELECT x FROM c"
    )
    out = await query(url, recursive)
    assert [r["x"] for r in out["rows"]] == [1, 2, 3]
    assert (await query(url, "SELECT * FROM orders WHERE id < 0"))["rows"] == []
    # Models like a trailing semicolon and comments.
    out = await query(url, "-- count\nSELECT count(*) AS n FROM customers; -- done\n")
    assert out["rows"] == [{"n": 2}]


async def test_sqlite_relative_url(sqlite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(sqlite_db.parent)
    out = await query("sqlite:///shop.db", "SELECT count(*) AS n FROM customers")
    assert out["rows"] == [{"n": 2}]


async def test_sqlite_schema_discovery(sqlite_db: Path) -> None:
    url = sqlite_url(sqlite_db)
    out = await query(url, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    assert [r["name"] for r in out["rows"]] == ["customers", "docs", "orders"]
    out = await query(url, "PRAGMA table_info(customers)")
    assert [r["name"] for r in out["rows"]] == ["id", "name"]


async def test_sqlite_limit_and_truncated(sqlite_db: Path) -> None:
    url = sqlite_url(sqlite_db)
    out = await query(url, "SELECT id FROM orders ORDER BY id")
    assert out["rowCount"] == 100 and out["truncated"] is True
    assert out["rows"][-1] == {"id": 100}
    out = await query(url, "SELECT id FROM orders ORDER BY id", limit=300)
    assert out["rowCount"] == 300 and out["truncated"] is False
    out = await query(url, "SELECT id FROM orders ORDER BY id", limit=7)
    assert out["rowCount"] == 7 and out["truncated"] is True


async def test_sqlite_256kb_cut(sqlite_db: Path) -> None:
    text = await TOOL.invoke(
        {"query": "SELECT id, body FROM docs ORDER BY id", "limit": 500},
        ctx(sqlite_url(sqlite_db)),
    )
    assert len(text.encode()) <= RESULT_BYTES
    out = json.loads(text)
    assert 20 < out["rowCount"] < 60
    assert out["truncated"] is True
    assert out["note"] == f"cut to {out['rowCount']} rows to stay under 256 KB"
    # One row bigger than the budget: no rows, and a note saying what to do.
    out = await query(sqlite_url(sqlite_db), "SELECT group_concat(body) AS b FROM docs")
    assert out["rowCount"] == 0 and out["truncated"] is True
    assert "first row alone is larger" in out["note"]


async def test_sqlite_huge_value_is_refused_by_sqlite(sqlite_db: Path) -> None:
    # The value is never built: SQLite's own length limit refuses it (50 MB here; the
    # attack was 500 MB, which took the worker to 2.9 GB before the 256 KB cut).
    message = await refused(sqlite_url(sqlite_db), "SELECT zeroblob(50000000) AS b")
    assert message == (
        "SQLite refused the query: a string or blob over sql_query's 1,048,576-byte limit per "
        "value (SQLITE_LIMIT_LENGTH); select a part (substr(col, 1, 2000)) or a measure "
        "(length(col)) instead of the whole value"
    )
    message = await refused(
        sqlite_url(sqlite_db), "SELECT group_concat(a.body) FROM docs a, docs b"
    )
    assert "1,048,576-byte limit per value" in message
    # Values below the limit still come back (cut to the result's budget as before).
    out = await query(sqlite_url(sqlite_db), "SELECT length(zeroblob(1000000)) AS n")
    assert out["rows"] == [{"n": 1000000}]


async def test_sqlite_statement_timeout(sqlite_db: Path) -> None:
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    )
    message = await refused(sqlite_url(sqlite_db), endless, SQL_STATEMENT_TIMEOUT_MS="200")
    assert "cancelled after the 200 ms statement timeout" in message


async def test_sqlite_syntax_error_is_reported(sqlite_db: Path) -> None:
    message = await refused(sqlite_url(sqlite_db), "SELEC * FROM orders")
    assert 'near "SELEC": syntax error' in message
    message = await refused(sqlite_url(sqlite_db), "SELECT * FROM nowhere")
    assert "no such table: nowhere" in message


SQLITE_ATTEMPTS: list[tuple[str, str]] = [
    ("INSERT INTO customers VALUES (3, 'Eve')", "INSERT 'customers'"),
    ("UPDATE orders SET total = 0", "UPDATE 'orders'"),
    ("DELETE FROM orders", "DELETE 'orders'"),
    ("DELETE FROM orders WHERE id = 1 RETURNING *", "DELETE 'orders'"),
    ("REPLACE INTO customers VALUES (1, 'Mallory')", "INSERT 'customers'"),
    ("INSERT OR IGNORE INTO customers VALUES (1, 'x')", "INSERT 'customers'"),
    (
        "INSERT INTO customers VALUES (1, 'x') ON CONFLICT(id) DO UPDATE SET name = 'x'",
        "INSERT 'customers'",
    ),
    ("WITH x AS (SELECT 9 AS id) INSERT INTO customers SELECT id, 'x' FROM x", "INSERT"),
    ("WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d", "syntax error"),
    ("DROP TABLE orders", "changing the schema (DELETE 'sqlite_master')"),
    ("DROP INDEX orders_customer", "changing the schema"),
    ("CREATE TABLE evil (a)", "changing the schema (INSERT 'sqlite_master')"),
    ("CREATE TEMP TABLE evil (a)", "changing the schema (INSERT 'sqlite_temp_master')"),
    ("CREATE INDEX evil ON orders(total)", "changing the schema"),
    ("CREATE VIEW evil AS SELECT 1", "changing the schema"),
    (
        "CREATE TRIGGER evil AFTER INSERT ON orders BEGIN DELETE FROM orders; END",
        "CREATE TRIGGER 'evil'",
    ),
    ("CREATE VIRTUAL TABLE evil USING fts5(a)", "changing the schema"),
    ("ALTER TABLE orders ADD COLUMN evil TEXT", "ALTER TABLE 'orders'"),
    ("ALTER TABLE orders RENAME TO evil", "ALTER TABLE 'orders'"),
    ("ATTACH DATABASE '{dir}/other.db' AS other", "ATTACH"),
    ("ATTACH DATABASE ':memory:' AS mem", "ATTACH"),
    ("DETACH DATABASE main", "DETACH 'main'"),
    ("PRAGMA user_version = 5", "PRAGMA 'user_version'"),
    ("PRAGMA query_only = OFF", "PRAGMA 'query_only'"),
    ("PRAGMA journal_mode = DELETE", "PRAGMA 'journal_mode'"),
    ("PRAGMA writable_schema = ON", "PRAGMA 'writable_schema'"),
    ("PRAGMA query_only = OFF; DELETE FROM orders", "PRAGMA 'query_only'"),
    ("SELECT 1; DELETE FROM orders", "only one statement per call"),
    ("SELECT * FROM orders; DROP TABLE orders", "only one statement per call"),
    ("BEGIN", "TRANSACTION 'BEGIN'"),
    ("BEGIN IMMEDIATE", "TRANSACTION 'BEGIN'"),
    ("COMMIT", "TRANSACTION 'COMMIT'"),
    ("SAVEPOINT s", "SAVEPOINT 's'"),
    ("VACUUM", "ATTACH"),
    ("VACUUM INTO '{dir}/copy.db'", "ATTACH"),
    ("REINDEX orders", "REINDEX"),
    ("ANALYZE", "ANALYZE"),
    ("SELECT load_extension('/tmp/evil.so')", "the function 'load_extension'"),
]


@pytest.mark.parametrize(("sql", "expected"), SQLITE_ATTEMPTS, ids=[a[0] for a in SQLITE_ATTEMPTS])
async def test_sqlite_write_attempt_is_refused(sqlite_db: Path, sql: str, expected: str) -> None:
    before = sqlite_state(sqlite_db)
    message = await refused(sqlite_url(sqlite_db), sql.format(dir=sqlite_db.parent))
    assert expected in message
    assert sqlite_state(sqlite_db) == before


def test_sqlite_has_enough_attempts() -> None:
    assert len(SQLITE_ATTEMPTS) >= 20


async def test_sqlite_refusals_explain_read_only(sqlite_db: Path) -> None:
    message = await refused(sqlite_url(sqlite_db), "DELETE FROM orders")
    assert message == (
        "SQLite refused the query: DELETE 'orders' is not allowed; sql_query is read-only: "
        "send a single SELECT (or WITH ... SELECT)"
    )


# -- PostgreSQL -----------------------------------------------------------------------------


def _pg_bindir() -> Path | None:
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@dataclass
class PgServer:
    base: Path
    port: int

    def url(self, user: str, db: str = "shop", scheme: str = "postgresql") -> str:
        return f"{scheme}://{user}@/{db}?host={self.base}&port={self.port}"

    def connect(self, user: str = "postgres", db: str = "shop") -> Any:
        import psycopg

        return psycopg.connect(self.url(user, db), autocommit=True)


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """A throwaway cluster from the Debian binaries: tmp dir, free port, socket in the tmp dir."""
    pytest.importorskip("psycopg", reason="pip install 'toren[sql]' for the PostgreSQL tests")
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb); "
            "apt-get install postgresql"
        )
    base = Path(tempfile.mkdtemp(prefix="toren-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root: run it as the user Debian's package creates.
        user = "postgres"
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as")
        os.chown(base, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", user, "--"]
    base.chmod(0o755)
    data = base / "data"
    port = free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
         "-E", "UTF8", "--locale=C", "--no-sync"],
        check=True, capture_output=True,
    )  # fmt: skip
    options = f"-k {base} -p {port} -c listen_addresses='' -c fsync=off"
    started = subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
         "-l", str(base / "log"), "-w", "-t", "60", "start"],
        capture_output=True,
    )  # fmt: skip
    if started.returncode != 0:
        log = (base / "log").read_text() if (base / "log").exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {started.stderr.decode()}\n{log}")
    server = PgServer(base, port)
    try:
        _pg_setup(server)
        yield server
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


def _pg_setup(server: PgServer) -> None:
    with server.connect(db="postgres") as su:
        # `agent` owns everything, so only the read-only transaction stands between it and a
        # write; `reader` has no grants at all; `postgres` is the superuser.
        su.execute("CREATE ROLE agent LOGIN")
        su.execute("CREATE ROLE reader LOGIN")
        su.execute("CREATE DATABASE shop OWNER agent")
    with server.connect("agent") as conn:
        conn.execute(
            """
            CREATE SEQUENCE order_seq;
            CREATE TABLE orders (
                id int PRIMARY KEY, customer text NOT NULL, total numeric(10, 2),
                created timestamptz, receipt bytea, tags text[], meta jsonb, ref uuid,
                wait interval, ratio double precision
            );
            INSERT INTO orders
            SELECT i, 'customer ' || i, i * 1.25, '2024-01-01 00:00:00+00'::timestamptz
                   + i * interval '1 hour', decode('00ff', 'hex'), ARRAY['a', 'b'],
                   jsonb_build_object('n', i), md5(i::text)::uuid, i * interval '1 minute',
                   i / 3.0
            FROM generate_series(1, 300) AS i;
            CREATE TABLE docs (id int PRIMARY KEY, body text);
            INSERT INTO docs SELECT i, repeat('x', 10000) FROM generate_series(1, 60) AS i;
            CREATE MATERIALIZED VIEW order_totals AS SELECT customer, total FROM orders;
            CREATE FUNCTION wipe() RETURNS bigint LANGUAGE sql
                AS 'WITH d AS (DELETE FROM orders RETURNING 1) SELECT count(*) FROM d';
            CREATE PROCEDURE wipe_proc() LANGUAGE sql AS 'DELETE FROM orders';
            CREATE FUNCTION wipe_dynamic() RETURNS void LANGUAGE plpgsql
                AS $$ BEGIN EXECUTE 'DELETE FROM orders'; END $$;
            """
        )
        conn.execute("ALTER TABLE orders ADD CONSTRAINT positive CHECK (total > 0)")
    with server.connect() as su:
        # Runs with the superuser's rights, and is still inside the caller's transaction.
        su.execute(
            "CREATE FUNCTION wipe_definer() RETURNS void LANGUAGE plpgsql SECURITY DEFINER "
            "AS $$ BEGIN DELETE FROM orders; END $$"
        )


PG_STATE = """
SELECT (SELECT count(*) FROM orders),
       (SELECT md5(string_agg(o::text, ',' ORDER BY id)) FROM orders o),
       (SELECT md5(string_agg(d::text, ',' ORDER BY id)) FROM docs d),
       (SELECT last_value::text || is_called::text FROM order_seq),
       (SELECT md5(string_agg(c.relname::text || c.relkind::text || coalesce(c.relacl::text, '')
                   || c.relpages::text || coalesce(obj_description(c.oid), ''), ',' ORDER BY relname))
          FROM pg_class c WHERE relnamespace = 'public'::regnamespace),
       (SELECT count(*) FROM pg_largeobject_metadata),
       (SELECT count(*) FROM pg_db_role_setting),
       (SELECT count(*) FROM pg_roles)
"""


def pg_state(server: PgServer) -> tuple[Any, ...]:
    with server.connect() as conn:
        row = conn.execute(PG_STATE).fetchone()
    assert row is not None and row[0] == 300
    return tuple(row)


async def test_pg_select_types(pg: PgServer) -> None:
    out = await query(pg.url("agent"), "SELECT * FROM orders WHERE id = 3")
    assert out["truncated"] is False
    assert out["rows"] == [
        {
            "id": 3,
            "customer": "customer 3",
            "total": "3.75",
            "created": "2024-01-01T03:00:00+00:00",
            "receipt": "\\x00ff",
            "tags": ["a", "b"],
            "meta": {"n": 3},
            "ref": str(uuid.UUID(hashlib.md5(b"3").hexdigest())),
            "wait": "0:03:00",
            "ratio": 1.0,
        }
    ]


async def test_pg_select_forms(pg: PgServer) -> None:
    url = pg.url("agent")
    # % is not a placeholder: the query is sent as is.
    out = await query(url, "SELECT count(*) AS n FROM orders WHERE customer LIKE 'customer 1%'")
    assert out["rows"] == [{"n": 111}]
    big = "WITH big AS (SELECT id FROM orders WHERE total > 370) SELECT id FROM big ORDER BY id"
    out = await query(url, big)
    assert out["rows"] == [{"id": 297}, {"id": 298}, {"id": 299}, {"id": 300}]
    out = await query(url, "SELECT 1 AS a, 2 AS a")
    assert out["rows"] == [{"a": 1, "a_2": 2}]
    out = await query(url, "SELECT current_setting('transaction_read_only') AS ro")
    assert out["rows"] == [{"ro": "on"}]
    out = await query(url, "TABLE order_totals", limit=2)
    assert out["rows"] == [
        {"customer": "customer 1", "total": "1.25"},
        {"customer": "customer 2", "total": "2.50"},
    ]
    # A query string with braces and a comment is sent untouched.
    out = await query(url, "SELECT '{}' AS b -- {x} %s\n")
    assert out["rows"] == [{"b": "{}"}]
    assert (await query(url, "VALUES (1, 'x')"))["rows"] == [{"column1": 1, "column2": "x"}]
    assert (await query(url, "SELECT * FROM orders WHERE id < 0")) == {
        "rowCount": 0,
        "truncated": False,
        "rows": [],
    }
    out = await query(url, "-- count\nSELECT count(*) AS n FROM orders; -- done\n")
    assert out["rows"] == [{"n": 300}]
    out = await query(pg.url("agent", scheme="postgres"), "SELECT current_user AS u")
    assert out["rows"] == [{"u": "agent"}]


async def test_pg_limit_and_truncated(pg: PgServer) -> None:
    url = pg.url("agent")
    out = await query(url, "SELECT id FROM orders ORDER BY id")
    assert out["rowCount"] == 100 and out["truncated"] is True
    out = await query(url, "SELECT id FROM orders ORDER BY id", limit=500)
    assert out["rowCount"] == 300 and out["truncated"] is False
    # A result far beyond the limit is fetched in small batches, never loaded whole.
    out = await query(url, "SELECT i FROM generate_series(1, 1000000) AS i", limit=3)
    assert out == {"rowCount": 3, "truncated": True, "rows": [{"i": 1}, {"i": 2}, {"i": 3}]}


async def test_pg_256kb_cut(pg: PgServer) -> None:
    text = await TOOL.invoke(
        {"query": "SELECT id, body FROM docs ORDER BY id", "limit": 500}, ctx(pg.url("agent"))
    )
    assert len(text.encode()) <= RESULT_BYTES
    out = json.loads(text)
    assert 20 < out["rowCount"] < 60 and out["truncated"] is True
    assert out["note"] == f"cut to {out['rowCount']} rows to stay under 256 KB"


async def test_pg_huge_row_is_refused_by_the_server(pg: PgServer) -> None:
    # libpq reads a row whole: the server checks each row's size before sending it.
    url = pg.url("agent")
    message = await refused(url, "SELECT repeat('x', 50000000) AS big")
    assert message.startswith("PostgreSQL refused the query: a row of 50,000,")
    assert "over sql_query's 1,048,576-byte limit per row; select a part" in message
    # A column named like the check's alias does not stand in for the row.
    message = await refused(url, "SELECT repeat('x', 50000000) AS big, 1 AS toren_row")
    assert "over sql_query's 1,048,576-byte limit per row" in message
    # A query that only makes sense wrapped (an unclosed parenthesis) is refused as written.
    message = await refused(url, "SELECT repeat('x', 50000000) AS big FROM (SELECT 1")
    assert "syntax error" in message and "toren_row" not in message
    out = await query(url, "SELECT length(repeat('x', 50000000)) AS n; -- one value")
    assert out["rows"] == [{"n": 50000000}]


async def test_pg_errors_carry_the_database_message(pg: PgServer) -> None:
    url = pg.url("agent")
    message = await refused(url, "SELEC 1")
    assert 'syntax error at or near "SELEC"' in message
    message = await refused(url, "SELECT nope FROM orders")
    assert 'column "nope" does not exist' in message
    message = await refused(pg.url("reader"), "SELECT * FROM orders")
    assert "permission denied for table orders" in message


async def test_pg_statement_timeout(pg: PgServer) -> None:
    message = await refused(pg.url("agent"), "SELECT pg_sleep(5)", SQL_STATEMENT_TIMEOUT_MS="300")
    assert "canceling statement due to statement timeout" in message


async def test_pg_superuser_is_refused(pg: PgServer, tmp_path: Path) -> None:
    before = pg_state(pg)
    target = f"/tmp/toren-pwned-{uuid.uuid4().hex}"
    message = await refused(pg.url("postgres"), f"COPY (SELECT 1) TO PROGRAM 'touch {target}'")
    assert "connects as 'postgres', a superuser" in message
    assert "GRANT SELECT" in message
    assert not Path(target).exists()
    assert "a superuser" in await refused(pg.url("postgres"), "SELECT 1")
    assert pg_state(pg) == before


async def test_pg_connection_errors_hide_the_password(pg: PgServer) -> None:
    url = f"postgresql://agent:hunter2secret@/missing_db?host={pg.base}&port={pg.port}"
    message = await refused(url, "SELECT 1")
    assert 'database "missing_db" does not exist' in message
    assert "hunter2secret" not in message
    message = await refused(f"postgresql://x:hunter2secret@/db?host={pg.base}&port=1", "SELECT 1")
    assert "cannot connect to PostgreSQL" in message and "hunter2secret" not in message


ONLY_QUERIES = "sql_query runs only queries (SELECT, WITH ... SELECT, VALUES, TABLE)"
READ_ONLY = "in a read-only transaction"

# (attempt, expected fragment of the error). `agent` owns every object, so statements that parse
# as a query are stopped by the read-only transaction (or privileges), not by ownership.
PG_ATTEMPTS: list[tuple[str, str]] = [
    # Statements that are not queries: PostgreSQL's grammar refuses them after DECLARE CURSOR.
    ("INSERT INTO orders (id, customer) VALUES (999, 'x')", ONLY_QUERIES),
    ("UPDATE orders SET total = 1", ONLY_QUERIES),
    ("DELETE FROM orders", ONLY_QUERIES),
    (
        "MERGE INTO orders o USING (SELECT 1 AS id) s ON o.id = s.id WHEN MATCHED THEN DELETE",
        ONLY_QUERIES,
    ),
    ("TRUNCATE orders", ONLY_QUERIES),
    ("DROP TABLE orders", ONLY_QUERIES),
    ("CREATE TABLE evil (a int)", ONLY_QUERIES),
    ("CREATE TEMP TABLE evil (a int)", ONLY_QUERIES),
    ("CREATE INDEX ON orders (total)", ONLY_QUERIES),
    ("ALTER TABLE orders ADD COLUMN evil int", ONLY_QUERIES),
    ("ALTER ROLE agent SET default_transaction_read_only = off", ONLY_QUERIES),
    ("GRANT SELECT ON orders TO reader", ONLY_QUERIES),
    ("COMMENT ON TABLE orders IS 'pwned'", ONLY_QUERIES),
    ("REFRESH MATERIALIZED VIEW order_totals", ONLY_QUERIES),
    ("COPY orders TO '/tmp/toren-copy-{n}'", ONLY_QUERIES),
    ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/toren-prog-{n}'", ONLY_QUERIES),
    ("COPY orders FROM '/etc/hostname'", ONLY_QUERIES),
    ("COPY orders TO STDOUT", ONLY_QUERIES),
    ("COPY orders FROM STDIN", ONLY_QUERIES),
    ("SET default_transaction_read_only = off", ONLY_QUERIES),
    ("SET TRANSACTION READ WRITE", ONLY_QUERIES),
    ("SET ROLE postgres", ONLY_QUERIES),
    ("SET SESSION AUTHORIZATION postgres", ONLY_QUERIES),
    ("BEGIN", ONLY_QUERIES),
    ("COMMIT", ONLY_QUERIES),
    ("ROLLBACK", ONLY_QUERIES),
    ("BEGIN; DELETE FROM orders", ONLY_QUERIES),
    ("COMMIT; DELETE FROM orders", ONLY_QUERIES),
    ("VACUUM", ONLY_QUERIES),
    ("VACUUM FULL orders", ONLY_QUERIES),
    # Maintenance a read-only transaction would let the owner run (then roll back).
    ("ANALYZE orders", ONLY_QUERIES),
    ("CLUSTER orders USING orders_pkey", ONLY_QUERIES),
    ("REINDEX TABLE orders", ONLY_QUERIES),
    ("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", ONLY_QUERIES),
    ("NOTIFY orders_changed", ONLY_QUERIES),
    ("LISTEN orders_changed", ONLY_QUERIES),
    ("PREPARE p AS DELETE FROM orders", ONLY_QUERIES),
    ("DISCARD ALL", ONLY_QUERIES),
    ("DO $$ BEGIN DELETE FROM orders; END $$", ONLY_QUERIES),
    ("CALL wipe_proc()", ONLY_QUERIES),
    ("EXPLAIN ANALYZE DELETE FROM orders", ONLY_QUERIES),
    # More than one statement: the extended protocol takes exactly one.
    ("SELECT 1; DELETE FROM orders", "only one statement per call"),
    ("SELECT 1; COMMIT; DELETE FROM orders", "only one statement per call"),
    (
        "SELECT set_config('transaction_read_only', 'off', false); DELETE FROM orders",
        "only one statement per call",
    ),
    # Queries that try to write: the read-only transaction refuses them.
    (
        "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d",
        "must not contain data-modifying statements in WITH",
    ),
    ("SELECT * INTO evil FROM orders", "SELECT ... INTO is not allowed here"),
    ("SELECT * FROM orders FOR UPDATE", "cannot execute SELECT FOR UPDATE " + READ_ONLY),
    ("SELECT * FROM orders FOR SHARE", "cannot execute SELECT FOR SHARE " + READ_ONLY),
    ("SELECT wipe()", READ_ONLY),
    ("SELECT wipe_definer()", READ_ONLY),
    ("SELECT wipe_dynamic()", "cannot execute DELETE " + READ_ONLY),
    (
        "SELECT query_to_xml('DELETE FROM orders RETURNING id', true, false, '')",
        "DELETE is not allowed in a non-volatile function",
    ),
    (
        "SELECT query_to_xml('CREATE TABLE evil AS SELECT 1', true, false, '')",
        "CREATE TABLE AS is not allowed in a non-volatile function",
    ),
    ("SELECT nextval('order_seq')", "cannot execute nextval() " + READ_ONLY),
    ("VALUES (nextval('order_seq'))", "cannot execute nextval() " + READ_ONLY),
    ("SELECT setval('order_seq', 42)", "cannot execute setval() " + READ_ONLY),
    (
        "SELECT set_config('transaction_read_only', 'off', false)",
        "transaction read-write mode must be set before any query",
    ),
    (
        "SELECT set_config('transaction_read_only', 'off', true)",
        "transaction read-write mode must be set before any query",
    ),
    # Server-side file and session escapes: privileges refuse them (agent is no superuser).
    ("SELECT lo_import('/etc/hostname')", "permission denied for function lo_import"),
    ("SELECT lo_export(0, '/tmp/toren-lo-{n}')", "permission denied for function lo_export"),
    ("SELECT pg_read_file('/etc/hostname')", "permission denied for function pg_read_file"),
    ("SELECT pg_reload_conf()", "permission denied for function pg_reload_conf"),
]


@pytest.mark.parametrize(("sql", "expected"), PG_ATTEMPTS, ids=[a[0] for a in PG_ATTEMPTS])
async def test_pg_write_attempt_is_refused(pg: PgServer, sql: str, expected: str) -> None:
    before = pg_state(pg)
    n = uuid.uuid4().hex
    message = await refused(pg.url("agent"), sql.format(n=n))
    assert expected in message
    assert pg_state(pg) == before
    for kind in ("copy", "prog", "lo"):
        assert not Path(f"/tmp/toren-{kind}-{n}").exists()
    # The next call is as read-only as ever.
    assert READ_ONLY in await refused(pg.url("agent"), "SELECT nextval('order_seq')")


def test_pg_has_enough_attempts() -> None:
    assert len(PG_ATTEMPTS) >= 20


# Statements PostgreSQL runs in a read-only transaction: each succeeds, and the rollback
# leaves nothing behind.
PG_HARMLESS = [
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT lo_create(0)",
    "SELECT pg_notify('orders_changed', 'x')",
    "SELECT txid_current()",
]


@pytest.mark.parametrize("sql", PG_HARMLESS)
async def test_pg_allowed_statement_leaves_nothing(pg: PgServer, sql: str) -> None:
    before = pg_state(pg)
    with pg.connect() as listener:
        listener.execute("LISTEN orders_changed")
        out = await query(pg.url("agent"), sql)
        assert out["rowCount"] == 1
        listener.execute("SELECT 1")  # delivers any pending notification
        assert list(listener.notifies(timeout=0.2)) == []
    assert pg_state(pg) == before
    assert READ_ONLY in await refused(pg.url("agent"), "SELECT nextval('order_seq')")
