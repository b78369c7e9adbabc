"""Payload limits: a 5 MB tool result or a model turn near Temporal's 2 MB limit does not wedge
the run; it is cut with a note the model can read, and the run goes on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

from tests.conftest import fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

HUGE = """
from toren import define_tool
tool = define_tool(description="Returns 5 MB.", handler=lambda a, c: "A" * 5_000_000 + "THE END")
"""


async def test_five_megabyte_tool_result_is_cut_with_a_note(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"huge": HUGE},
        script=[{"tool_calls": [{"id": "h", "name": "huge", "args": {}}]}, "went on"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
        transcript = await handle.query("transcript")
    assert result.text == "went on"
    seen = transcript[2]["content"]
    assert "[toren: tool huge's result was 5,000,007 bytes; cut to its first and last" in seen
    assert seen.endswith("THE END") and len(seen.encode()) <= 256 * 1024
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    assert sum(e.ByteSize() for e in history.events) < 1_000_000


async def test_model_turn_near_two_megabytes_is_cut(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"huge": HUGE},
        script=[
            {"text": "B" * 1_900_000, "tool_calls": [{"id": "x", "name": "huge", "arguments": '{"pad": "' + "C" * 1_000_000 + '"}'}]},
            "after {last_tool_result}",
        ],
    )  # fmt: skip
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text.startswith("after invalid arguments for huge: not valid JSON")
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    reply = next(e for e in render(history) if e["type"] == "LlmCallCompleted")
    assert "[toren: the model's text was 1,900,000 bytes" in reply["text"]
