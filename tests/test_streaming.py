"""Live output on a real dev server: deltas, tool progress, retries, late readers, threads.

The scripted mock streams its reply in chunks when the model activity asks (`on_delta`), with
a pause of `stream_delay_ms` after each, so a subscriber can watch the reply while the model
activity is still running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, result_of, secret, task_failures, wait_for
from toren import client as toren_client
from toren.client import StreamEvent
from toren.worker import serve

SEEN: list[dict[str, Any]] = []
"""Every item any test here read, for the secret check."""

ANSWER = "The order A-1002 left the warehouse on Monday and arrives on Thursday, tracking TR-77."

SLOW = """
import asyncio
from toren import define_tool

async def slow(args, ctx):
    ctx.emit("begun", {"of": args.get("what")})
    await asyncio.sleep(3)
    ctx.emit("halfway", {})
    return "slow done"

tool = define_tool(
    description="Takes a while.",
    input={"type": "object", "properties": {"what": {"type": "string"}}},
    progress_argument="what",
    handler=slow,
)
"""

LEAKY = """
from toren import Variable, define_tool

def leaky(args, ctx):
    ctx.emit("token", {"value": ctx.env["STREAM_TOKEN"]})
    return "used " + ctx.env["STREAM_TOKEN"]

tool = define_tool(
    description="Leaks its token.",
    input={"type": "object", "properties": {"note": {"type": "string"}}},
    variables=[Variable("STREAM_TOKEN", type="secret", required=True, description="token")],
    handler=leaky,
)
"""


async def collect(
    client: Client, run_id: str, from_offset: int = 0, until: Callable[[StreamEvent], bool] = (
        lambda e: False
    ), on: Callable[[StreamEvent], Any] | None = None,
) -> tuple[list[StreamEvent], toren_client.LiveStream]:  # fmt: skip
    live = toren_client.stream(client, run_id, from_offset)
    events: list[StreamEvent] = []
    async for event in live:
        events.append(event)
        SEEN.append(event.data)
        if on is not None:
            result = on(event)
            if asyncio.iscoroutine(result):
                await result
        if until(event):
            break
    return events, live


async def model_running(client: Client, run_id: str, prefix: str = "toren.call_model") -> bool:
    description = await client.get_workflow_handle(run_id).describe()
    return any(
        p.activity_type.name.startswith(prefix)
        for p in description.raw_description.pending_activities
    )


async def test_deltas_arrive_while_the_model_writes_and_add_up_to_the_message(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    folder = make_agent(script=[{"text": ANSWER, "stream_delay_ms": 100}])
    seen_running: list[bool] = []

    async def on(event: StreamEvent) -> None:
        if event.type == "text_delta" and not seen_running:
            seen_running.append(await model_running(client, run_id))

    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "where?", run_id=run_id)
        events, live = await collect(client, run_id, on=on)
        result = await result_of(handle)
        # A reader that joins after the end, or reconnects from an offset, misses nothing
        # (a finished run's stream is read with a query: a worker answers it).
        late, late_live = await collect(client, run_id)
        resumed, _ = await collect(client, run_id, from_offset=3)
    assert seen_running == [True], "the first delta arrived after the model call completed"
    deltas = [e for e in events if e.type == "text_delta"]
    assert len(deltas) > 2, "the text came in batches, not at once"
    assert "".join(e.data["text"] for e in deltas) == result.text == ANSWER
    assert live.text == ANSWER
    assert all(e.data["run_id"] == run_id and e.data["step"] == 1 for e in deltas)
    assert all(e.data["attempt"] == 1 for e in deltas)
    assert events[-1].type == "run_completed" and events[-1].data["text"] == ANSWER
    offsets = [e.offset for e in events]
    assert offsets == list(range(len(events)))

    assert [e.data for e in late] == [e.data for e in events]
    assert late_live.text == ANSWER
    assert [(e.offset, e.data) for e in resumed] == [(e.offset, e.data) for e in events[3:]]
    history = await fetch_history(client, run_id)
    assert not task_failures(history)


async def test_tool_progress_arrives_while_the_tool_runs(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    folder = make_agent(
        tools={"slow": SLOW},
        script=[
            {"tool_calls": [{"id": "s1", "name": "slow", "args": {"what": "the report"}}]},
            "finished: {last_tool_result}",
        ],
    )
    running_at_progress: list[bool] = []

    async def on(event: StreamEvent) -> None:
        if event.type == "tool_progress" and event.data["event"] == "begun":
            running_at_progress.append(await model_running(client, run_id, f"{folder.name}."))

    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        events, _ = await collect(client, run_id, on=on)
        result = await result_of(handle)
    assert result.text == "finished: slow done"
    assert running_at_progress == [True], "the emit arrived only after the tool had finished"
    kinds = [e.type for e in events]
    started = next(e for e in events if e.type == "tool_call_started")
    # The progress argument was whole while the model still streamed the call's arguments.
    assert started.data["progress"] == "the report" and started.data["call_id"] == "s1"
    assert kinds.index("tool_call_started") < kinds.index("tool_progress")
    progress = [e.data for e in events if e.type == "tool_progress"]
    assert [(p["event"], p["call_id"], p["attempt"]) for p in progress] == [
        ("begun", "s1", 1),
        ("halfway", "s1", 1),
    ]
    assert progress[0]["data"] == {"of": "the report"}
    completed = next(e for e in events if e.type == "tool_call_completed")
    assert completed.data == {**completed.data, "call_id": "s1", "is_error": False}
    assert kinds[-1] == "run_completed"


async def test_a_worker_killed_mid_stream_supersedes_its_attempt(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer, run_id: str
) -> None:
    long_text = " ".join(f"word{i}" for i in range(60))
    folder = make_agent(script=[{"text": long_text, "stream_delay_ms": 150}])
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    cmd = [sys.executable, "-m", "toren.cli", "worker", str(folder)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    try:
        handle = await toren_client.start_run(client, folder.name, "talk", run_id=run_id)
        live = toren_client.stream(client, run_id)
        events: list[StreamEvent] = []

        async def read() -> None:
            async for event in live:
                events.append(event)
                SEEN.append(event.data)

        reader = asyncio.ensure_future(read())
        await wait_for(lambda: sum(e.type == "text_delta" for e in events) >= 3, timeout=60)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert live.text and live.text != long_text
        second = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        result = await asyncio.wait_for(handle.result(), timeout=90)
        await asyncio.wait_for(reader, timeout=30)
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert result.text == long_text
    superseded = [e.data for e in events if e.type == "superseded"]
    assert superseded and superseded[0]["attempt"] == 1 and superseded[0]["step"] == 1
    retry = next(e.data for e in events if e.type == "model_retry")
    assert retry["attempt"] == 2 and retry["max_attempts"] == 10
    # Attempt 1's partial text is gone; attempt 2's whole text is the answer.
    assert live.text == long_text
    again = "".join(
        e.data["text"] for e in events if e.type == "text_delta" and e.data["attempt"] == 2
    )
    assert again == long_text


async def test_stream_false_publishes_no_deltas_and_the_run_works(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    folder = make_agent(
        tools={"slow": SLOW},
        script=[
            {"tool_calls": [{"id": "s1", "name": "slow", "args": {"what": "x"}}]},
            {"text": ANSWER, "stream_delay_ms": 10},
        ],
        stream=False,
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        result = await result_of(handle)
        events, _ = await collect(client, run_id)
    assert result.text == ANSWER
    kinds = {e.type for e in events}
    assert not kinds & {"text_delta", "tool_call_delta", "tool_progress"}
    assert "run_completed" in kinds  # the workflow's own items cost no history
    history = await fetch_history(client, run_id)
    assert b"__temporal_workflow_stream_publish" not in history.to_json().encode()


async def test_a_thread_streams_across_two_messages(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        script=[
            {"text": "First answer, streamed in pieces.", "stream_delay_ms": 20},
            {"text": "Second answer, also streamed.", "stream_delay_ms": 20},
        ]
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_thread(client, folder.name)
        reader = asyncio.ensure_future(
            collect(client, handle.id, until=lambda e: e.type == "thread_closed")
        )
        one = await toren_client.send_message(client, handle.id, "hi")
        two = await toren_client.send_message(client, handle.id, "again")
        await toren_client.close_thread(client, handle.id)
        events, live = await asyncio.wait_for(reader, timeout=30)
    assert one["text"] == "First answer, streamed in pieces."
    assert two["text"] == "Second answer, also streamed."
    kinds = [e.type for e in events]
    assert kinds.count("message_received") == 2 and kinds.count("message_completed") == 2
    second = kinds.index("message_received", kinds.index("message_received") + 1)
    texts = [
        "".join(e.data["text"] for e in part if e.type == "text_delta")
        for part in (events[:second], events[second:])
    ]
    assert texts == [one["text"], two["text"]]
    assert live.text == two["text"]
    assert [e.data["content"] for e in events if e.type == "message_received"] == ["hi", "again"]
    assert kinds[-1] == "thread_closed"


async def test_published_items_hold_no_secret(
    client: Client, make_agent: Callable[..., Path], run_id: str, monkeypatch: Any
) -> None:
    token = secret("stream-token-5d1c88e0a7")
    monkeypatch.setenv("STREAM_TOKEN", token)
    # The model repeats the secret, in its text and a call's arguments, split across many
    # deltas (8 characters each).
    folder = make_agent(
        tools={"leaky": LEAKY},
        script=[
            {
                "text": f"calling with {token}",
                "tool_calls": [{"id": "l1", "name": "leaky", "args": {"note": token}}],
                "stream_delay_ms": 5,
            },
            {"text": "the token is " + token + ", and again " + token, "stream_delay_ms": 5},
        ],  # fmt: skip
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        events, live = await collect(client, run_id)
        await result_of(handle)
    assert live.text == "the token is [redacted], and again [redacted]"
    assert any(e.type == "tool_progress" for e in events)
    arguments = "".join(e.data["arguments"] for e in events if e.type == "tool_call_delta")
    assert json.loads(arguments) == {"note": "[redacted]"}
    for item in SEEN:
        assert token not in json.dumps(item), item
    await fetch_history(client, run_id)  # the suite-wide search checks the history too


async def test_a_quick_model_calls_items_ride_in_its_result_and_reach_readers_whole(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    # A scripted reply returns at once: its deltas are still unsent when the call ends, so
    # they ride in the call's result, without the run id, step and attempt the run knows.
    call = {"id": "c1", "name": "missing_tool", "args": {"q": None}}
    folder = make_agent(script=[{"tool_calls": [call]}, "done"])
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await result_of(handle)
        events, _ = await collect(client, run_id)
    deltas = [e.data for e in events if e.type == "tool_call_delta"]
    assert [(d["run_id"], d["step"], d["attempt"], d["id"]) for d in deltas] == [
        (run_id, 1, 1, "c1")
    ]
    history = await fetch_history(client, run_id)
    results = [
        json.loads(e.activity_task_completed_event_attributes.result.payloads[0].data)
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
    ]
    assert results[0]["live"] == [
        {"type": "tool_call_delta", "index": 0, "id": "c1", "name": "missing_tool",
         "arguments": '{"q": null}'}
    ]  # fmt: skip
    # Fields left at their default are not written; a null in the arguments stays.
    assert "earlier_usage" not in results[0] and "finish_reason" not in results[0]


GATE = """
from toren import define_tool

tool = define_tool(description="Gated.", approval="always", handler=lambda a, c: "done")
"""


async def test_a_malformed_publish_signal_is_dropped_and_the_run_goes_on(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    # Anyone can send the stream's publish signal. One whose items are not serialized Payloads
    # made the SDK's handler raise: the workflow task failed again and again, the run stuck.
    folder = make_agent(
        tools={"gate": GATE}, script=[{"tool_calls": [{"id": "g", "name": "gate", "args": {}}]}]
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await toren_client.wait_for_approval(client, run_id, timeout=30)
        bad_items = [
            {"items": [{"topic": "toren", "data": "!!!"}], "publisher_id": "p", "sequence": 1},
            {"items": [{"topic": "toren", "data": "AAAA"}], "publisher_id": "p", "sequence": 2},
            {"items": [{"topic": 5, "data": ""}]},
            {"items": "none"},
            "garbage",
        ]
        for bad in bad_items:
            await client.get_workflow_handle(run_id).signal(
                "__temporal_workflow_stream_publish", bad
            )
        await toren_client.decide(client, run_id, "g", approved=True)
        result = await result_of(handle)
        events, _ = await collect(client, run_id)
    assert result.text
    assert not task_failures(await fetch_history(client, run_id))
    assert [e.offset for e in events] == list(range(len(events)))  # nothing of them got in
