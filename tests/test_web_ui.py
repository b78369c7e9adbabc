"""Approving from the Temporal Web UI, in a real (headless) browser.

A run parks on a gated call; the browser opens the run's page, reads the current details as
the page renders them, takes the JSON they say to paste, and sends it through
More Actions → Send a Signal — exactly what a person does.

`TOREN_SCREENSHOTS=1` writes the README's screenshots to docs/images/ (otherwise to tmp).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests import browser
from tests.conftest import ROOT, DevServer, fetch_history, task_failures, wait_for
from tests.test_approvals import PAY, paid
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

pytestmark = pytest.mark.skipif(
    not browser.available(),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver)",
)

IMAGES = ROOT / "docs" / "images"
CALL = "call_pay"


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """One headless Chromium for the module (each test opens its own page)."""
    with browser.chromium() as chrome:
        yield chrome


@pytest.fixture
def agent_name() -> str:
    """A readable agent name for the screenshots, still one task queue per test."""
    return f"payments_{uuid.uuid4().hex[:6]}"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: docs/images/ with TOREN_SCREENSHOTS=1, else the test's tmp."""
    return IMAGES if os.environ.get("TOREN_SCREENSHOTS") == "1" else tmp_path


@pytest.fixture
def pay_agent(make_agent: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """An agent whose one call (pay 500) is gated; the tool appends a line per execution."""
    log = tmp_path / "pay.jsonl"
    folder = make_agent(
        tools={"pay": PAY},
        script=[
            {"tool_calls": [{"id": CALL, "name": "pay", "args": {"amount": 500}}]},
            "result: {last_tool_result}",
        ],
        env={"required": ["PAY_LOG"]},
    )
    return folder, log


async def park(client: Client, folder: Path) -> WorkflowHandle[Any, Any]:
    handle = await toren_client.start_run(client, folder.name, "pay the supplier")
    calls = await wait_for(lambda: toren_client.pending(client, handle.id))
    assert [c.call_id for c in calls] == [CALL]
    return handle


def only(blocks: list[str]) -> str:
    assert len(blocks) == 1, blocks
    return blocks[0]


async def test_approve_from_the_web_ui(
    client: Client, dev_server: DevServer, driver: Any, pay_agent: tuple[Path, Path], shots: Path
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)

        def person() -> tuple[str, str, dict[str, str]]:
            page = browser.WorkflowPage(driver, dev_server.ui_port, handle.id)
            page.open()
            details = page.current_details()
            page.show_heading_and_details()
            page.screenshot(shots / "web-ui-approval-details.png")
            shown = only(browser.pasted_json(details, "approve"))
            pasted = shown.replace("your-name", "alice")  # a person puts their name in
            dialog = page.open_signal_dialog("approve")
            page.fill_data(dialog, pasted)
            page.screenshot(shots / "web-ui-send-signal.png")
            page.submit(dialog)
            return details, shown, page.signal_descriptions

        details, shown, descriptions = await asyncio.to_thread(person)
        result = await asyncio.wait_for(handle.result(), 60)

    assert f"pay - call {CALL}" in details
    assert 'args: {"amount": 500}' in details
    assert "More Actions > Send a Signal" in details
    assert json.loads(shown) == {"call_id": CALL, "by": "your-name", "comment": ""}
    assert descriptions["approve"].startswith("Approve a waiting tool call.")
    assert descriptions["deny"].startswith("Deny a waiting tool call")
    assert result.text == "result: paid 500"
    assert paid(log) == [{"amount": 500}]  # ran exactly once
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    resolved = [e for e in render(history) if e["type"] == "ApprovalResolved"]
    assert len(resolved) == 1
    assert resolved[0]["by"] == "alice" and resolved[0]["approved"] is True


async def test_deny_from_the_web_ui(
    client: Client, dev_server: DevServer, driver: Any, pay_agent: tuple[Path, Path]
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)

        def person() -> str:
            page = browser.WorkflowPage(driver, dev_server.ui_port, handle.id)
            page.open()
            shown = only(browser.pasted_json(page.current_details(), "deny"))
            dialog = page.open_signal_dialog("deny")
            page.fill_data(dialog, shown.replace("your-name", "bob"))
            page.submit(dialog)
            return shown

        shown = await asyncio.to_thread(person)
        result = await asyncio.wait_for(handle.result(), 60)

    assert json.loads(shown) == {"call_id": CALL, "by": "your-name", "comment": "why"}
    assert result.text == "result: denied by bob: why"
    assert paid(log) == []  # never ran
    assert not task_failures(await fetch_history(client, handle.id))


async def test_empty_data_is_refused_and_the_run_keeps_waiting(
    client: Client, dev_server: DevServer, driver: Any, pay_agent: tuple[Path, Path]
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        page = browser.WorkflowPage(driver, dev_server.ui_port, handle.id)

        def send_empty() -> None:
            page.open()
            dialog = page.open_signal_dialog("approve")
            page.submit(dialog)  # Data left empty: the UI sends the signal with no payload

        await asyncio.to_thread(send_empty)
        refused = await wait_for(lambda: handle.query("refused_signals"))
        assert [(r["signal"], r["reason"]) for r in refused] == [
            ("approve", "expected one JSON object, got an empty payload")
        ]
        assert [c.call_id for c in await toren_client.pending(client, handle.id)] == [CALL]
        assert paid(log) == []
        assert not task_failures(await fetch_history(client, handle.id))

        def reread() -> str:
            page.open()  # a fresh load shows the details as they are now
            return page.current_details()

        details = await asyncio.to_thread(reread)
        assert f"pay - call {CALL}" in details  # still waiting, and the page says why not
        assert "Last refused signal (approve): expected one JSON object" in details

        await toren_client.approve(client, handle.id, CALL, by="carol")
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.text == "result: paid 500"
    assert paid(log) == [{"amount": 500}]
    assert not task_failures(await fetch_history(client, handle.id))
