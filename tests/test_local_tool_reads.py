"""A tool that runs as a local activity reads its run's state and messages, in a run and in a
thread, instead of waiting on a query its own open workflow task cannot answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import fetch_history, result_of
from toren import client as toren_client
from toren.agent._types import ToolCallInput
from toren.worker import serve
from toren.worker.activities._run_reads import RunReads
from toren.worker.models import ScriptedModel

# Both tools qualify for a local activity: effects none, no key, timeout_ms <= 10 000.
LOCAL = """
from toren import define_tool

async def handler(args, ctx):
    if "set" in args:
        await ctx.set_value("color", args["set"])
        return "stored"
    seen = await ctx.get_messages()
    mine = await ctx.execution.message_history()
    return (f"color={await ctx.get_value('color')} messages={len(seen)} "
            f"first={seen[0]['content']} execution={len(mine)}")

tool = define_tool(
    description="Remember or recall a color.",
    input={"type": "object", "properties": {"set": {"type": "string"}}},
    effects="none", idempotency="none", timeout_ms=5_000, {extra}
    handler=handler,
)
"""


def step(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": "", "tool_calls": list(calls)}


def call(id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": "recall", "args": args}


def tool_results(seen: list[list[dict[str, Any]]]) -> list[str]:
    return [m["content"] for m in seen[-1] if m.get("role") == "tool"]


async def test_a_local_tool_reads_state_set_earlier_and_the_messages(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def after(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "done"

    folder = make_agent(tools={"recall": LOCAL.replace("{extra}", "")})
    script = [step(call("a", set="teal")), step(call("b")), after]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        handle = await toren_client.start_run(client, folder.name, "hello there")
        assert (await result_of(handle)).text == "done"
        history = await fetch_history(client, handle.id)
    # The prompt, the model's call, its result, the model's second call: four messages before.
    assert tool_results(seen) == [
        "stored",
        "color=teal messages=4 first=hello there execution=4",
    ]
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert len(markers) >= 2, "the calls ran as local activities"
    scheduled = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name.endswith(".recall")
    ]
    assert scheduled == []
    # A marker records the local call's result, not its input: the state and the transcript
    # the call took along are not in history.
    recorded = [
        payload.data
        for marker in markers
        for payloads in marker.marker_recorded_event_attributes.details.values()
        for payload in payloads.payloads
    ]
    assert any(b"color=teal" in data for data in recorded)
    for data in recorded:
        for key in (b'"idempotency_key"', b'"transcript"', b'"role"'):
            assert key not in data, data


async def test_a_regular_tool_activity_input_carries_no_state_or_messages(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def after(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "done"

    # `max_attempts` aside, the same tool with a long timeout runs as a regular activity.
    folder = make_agent(tools={"recall": LOCAL.replace("5_000", "60_000").replace("{extra}", "")})
    script = [step(call("a", set="teal")), step(call("b")), after]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        handle = await toren_client.start_run(client, folder.name, "hello there")
        assert (await result_of(handle)).text == "done"
        history = await fetch_history(client, handle.id)
    assert tool_results(seen)[-1] == "color=teal messages=4 first=hello there execution=4"
    inputs = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name.endswith(".recall")
    ]
    assert len(inputs) == 2
    for data in inputs:
        assert "state" not in data and "transcript" not in data, data


async def test_a_local_tool_in_a_thread_reads_state_an_earlier_message_set(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def after(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "ok"

    folder = make_agent(tools={"recall": LOCAL.replace("{extra}", "")})
    script = [step(call("a", set="plum")), after, step(call("b")), after]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        thread = await toren_client.start_thread(client, folder.name)
        await toren_client.send_message(client, thread.id, "first message")
        await toren_client.send_message(client, thread.id, "second message")
        await toren_client.close_thread(client, thread.id)
    # The thread's whole conversation: both messages, the first's call and result, its answer,
    # then the second's call; this execution started at the second message (index 4).
    assert tool_results(seen)[-1] == ("color=plum messages=6 first=first message execution=2")


async def test_a_local_tool_reads_the_messages_of_the_runs_its_run_continued_from(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def after(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "done"

    folder = make_agent(
        tools={"recall": LOCAL.replace("{extra}", "")},
        limits={"continueAsNewAfterEvents": 100},
    )
    sets = [step(call(f"s{n}", set=f"c{n}")) for n in range(20)]
    script = [*sets, step(call("b")), after]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        handle = await toren_client.start_run(client, folder.name, "hello there")
        assert (await result_of(handle)).text == "done"
        latest = await client.get_workflow_handle(handle.id).describe()
    assert latest.run_id != handle.first_execution_run_id, "the run continued as new"
    # The prompt, 20 calls and their results, then the call reading them: the earlier runs'
    # messages come from their queries, this run's from the call's input.
    assert tool_results(seen)[-1] == "color=c19 messages=42 first=hello there execution=42"


async def test_a_local_call_without_its_runs_answers_fails_at_once_saying_why() -> None:
    # A local call's run always sends them; were one not to, the read must not wait on a
    # query its own workflow task holds up until the call times out.
    local = ToolCallInput("c", "recall", {}, "wf:1:c", 1)
    reads = RunReads("wf/run", local)
    with pytest.raises(RuntimeError) as raised:
        await reads.read_state()
    assert str(raised.value).startswith(
        "ctx.get_value cannot read the run here: tool 'recall' runs as a local activity and "
        "its run sent no 'state' with the call"
    )
    with pytest.raises(RuntimeError, match="ctx.get_messages cannot read the run here"):
        await reads.read_messages()
