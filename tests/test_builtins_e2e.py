"""Built-ins inside real runs: a PDF attached with `toren attach` read by `read_attachment`,
and a SQLite database queried by `sql_query`, each as an activity of an AgentRun."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from tests.conftest import fetch_history, result_of
from tests.test_attachments import make_pdf
from toren import client as toren_client
from toren.client._events import render
from toren.client._render_run import MODEL_ACTIVITY
from toren.worker import serve


async def test_attached_pdf_is_read_page_by_page(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, monkeypatch: object
) -> None:
    store = tmp_path / "store"
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(make_pdf(["Invoice 4711", "Total due: 99.50 EUR"]))
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "attach", str(pdf), "--store", str(store)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    file_id = out.stdout.split()[0]
    assert file_id.startswith("att_") and "invoice.pdf" in out.stdout
    folder = make_agent(
        builtin_tools=["read_attachment"],
        script=[
            {"tool_calls": [{"id": "r", "name": "read_attachment", "args": {"file_id": file_id}}]},
            {"tool_calls": [{"id": "x", "name": "read_attachment", "args": {"file_id": "att_0000000000000000"}}]},
            "read: {last_tool_result}",
        ],
    )  # fmt: skip
    os.environ["TOREN_ATTACHMENTS"] = str(store)
    try:
        async with serve(client, [folder]):
            handle = await toren_client.start_run(
                client, folder.name, "what is due?", attachments=[file_id]
            )
            result = await result_of(handle)
    finally:
        del os.environ["TOREN_ATTACHMENTS"]
    events = render(await fetch_history(client, handle.id))
    first = next(e for e in events if e["type"] == "ToolCallCompleted" and e["callId"] == "r")
    page = json.loads(first["result"])
    assert page["name"] == "invoice.pdf" and page["page"] == 1 and page["of"] == 1
    assert "Total due: 99.50 EUR" in page["text"]
    assert (
        f"'att_0000000000000000' is not attached to this run (attached: {file_id})" in result.text
    )
    started = next(e for e in events if e["type"] == "RunStarted")
    assert started["attachments"] == [file_id]  # the run's input names ids, never bytes
    # The model is told which ids it may read: the opening message names them.
    history = await fetch_history(client, handle.id)
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_ACTIVITY
    ]
    tail = json.loads(scheduled[0].input.payloads[0].data)["tail"]
    assert tail[0]["message"] == {
        "role": "user",
        "content": f"what is due?\n\n(files attached to this message: {file_id})",
    }


async def test_sql_query_through_a_run_is_read_only(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id TEXT, total REAL)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [("A-1", 10.0), ("A-2", 32.5)])
    folder = make_agent(
        builtin_tools=["sql_query"],
        script=[
            {"tool_calls": [
                {"id": "q", "name": "sql_query", "args": {"query": "SELECT id, total FROM orders ORDER BY id"}},
                {"id": "w", "name": "sql_query", "args": {"query": "DELETE FROM orders"}},
            ]},
            "done",
        ],
    )  # fmt: skip
    async with serve(client, [folder], environ={"SQL_DATABASE_URL": f"sqlite:///{db}"}):
        handle = await toren_client.start_run(client, folder.name, "totals?")
        await result_of(handle)
    events = render(await fetch_history(client, handle.id))
    results = {e["callId"]: e for e in events if e["type"] == "ToolCallCompleted"}
    assert json.loads(results["q"]["result"]) == {
        "rowCount": 2,
        "truncated": False,
        "rows": [{"id": "A-1", "total": 10.0}, {"id": "A-2", "total": 32.5}],
    }
    assert results["w"]["isError"] is True
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (2,)
