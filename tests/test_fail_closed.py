"""`maxAttempts` fails closed on every placement: a call out of attempts is an error result.

A tool with `effects: none`, `idempotency: none` and a short `timeout_ms` runs as a local
activity, any other as a regular one; whichever, a call that fails on every attempt goes back to
the model as `tool X failed closed after N attempts` after exactly N attempts, and the run goes
on. The same for an MCP tool whose server dies on every call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

FAILING = """
from temporalio.exceptions import ApplicationError
from toren import define_tool

def failing(args, ctx):
    with open(args["log"], "a") as f:
        f.write(f"{{ctx.attempt}}\\n")
    raise ApplicationError("upstream is down")   # retryable: Temporal tries again

tool = define_tool(
    description="Fails on every attempt.",
    input={{"type": "object", "properties": {{"log": {{"type": "string"}}}}, "required": ["log"]}},
    effects="none",
    idempotency="none",
    timeout_ms={timeout_ms},
    max_attempts=3,
    handler=failing,
)
"""

CRASHING = Path(__file__).resolve().parent / "mcp_servers" / "prying.py"


def tool_activities(history: Any) -> tuple[int, int]:
    """(local, regular) tool activities in `history` (toren's own left out)."""
    local = regular = 0
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                local += b"toren." not in marker.SerializeToString()
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            regular += not name.startswith("toren.")
    return local, regular


@pytest.mark.parametrize("timeout_ms", [5000, 20000], ids=["local", "regular"])
async def test_a_tool_out_of_attempts_fails_closed_on_every_placement(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, timeout_ms: int
) -> None:
    log = tmp_path / "attempts.txt"
    folder = make_agent(
        tools={"failing": FAILING.format(timeout_ms=timeout_ms)},
        script=[
            {"tool_calls": [{"id": "f", "name": "failing", "args": {"log": str(log)}}]},
            "model saw: {last_tool_result}",
        ],
    )
    async with serve(client, [folder], environ={}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "model saw: tool failing failed closed after 3 attempts"
    assert log.read_text().split() == ["1", "2", "3"]  # exactly maxAttempts, no more, no fewer
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    # The placement the test means: a local activity (a marker) or a regular one.
    assert tool_activities(history) == ((1, 0) if timeout_ms == 5000 else (0, 1))
    # The event log tells the same story on both placements: the call failed, its last error.
    tool_events = [e for e in render(history) if e["type"].startswith("ToolCall")]
    assert [(e["type"], e.get("error")) for e in tool_events] == [
        ("ToolCallStarted", None),
        ("ToolCallFailed", "upstream is down"),
    ]


@pytest.mark.parametrize("timeout_ms", [5000, 20000], ids=["local", "regular"])
async def test_an_mcp_server_dying_on_every_call_fails_closed(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, timeout_ms: int
) -> None:
    folder = make_agent(
        mcp_servers={
            "crashy": {
                "command": [sys.executable, str(CRASHING)],
                "effects": "none",
                "idempotency": "none",
                "timeout_ms": timeout_ms,
                "max_attempts": 2,
                "tools": ["crash"],
            }
        },
        script=[
            {"tool_calls": [{"id": "c", "name": "crashy__crash", "args": {}}]},
            "model saw: {last_tool_result}",
        ],
    )
    async with serve(client, [folder], environ={}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "model saw: tool crashy__crash failed closed after 2 attempts"
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    assert tool_activities(history) == ((1, 0) if timeout_ms == 5000 else (0, 1))
