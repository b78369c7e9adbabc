"""Tools the model's provider runs itself (Anthropic's hosted web search), on a faked Messages API.

The provider's declaration goes out in the request, its `server_tool_use` and
`web_search_tool_result` blocks come back in the reply and go back verbatim in the next
request, the event log shows the call, and the workflow schedules no activity for it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Replayer

from tests._sdk_http import sdk_client
from tests.conftest import fetch_history, result_of
from toren import AgentRun
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.worker import serve
from toren.worker.models import ScriptedModel
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelRequest

KEY = "sk-ant-test-1234567890"

SEARCH = """
from toren import define_tool

tool = define_tool(
    description="Search the web.",
    input={"type": "object", "properties": {"query": {"type": "string"}}},
    execution_mode="provider",
    execution_provider="anthropic",
    provider_options={"max_uses": 2},
    progress_argument="query",
)
"""

LOOKUP = """
from toren import define_tool

tool = define_tool(
    description="Look an order up.",
    input={"type": "object", "properties": {"order_id": {"type": "string"}}},
    handler=lambda a, c: "order " + a["order_id"] + " shipped",
)
"""

SEARCHED: list[dict[str, Any]] = [
    {"type": "text", "text": "Let me search."},
    {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "temporal durable execution"},
    },
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://temporal.io/",
                "title": "Temporal",
                "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Mjc",
                "page_age": "April 30, 2025",
            }
        ],
    },
    {
        "type": "text",
        "text": "Temporal runs code durably.",
        "citations": [
            {
                "type": "web_search_result_location",
                "url": "https://temporal.io/",
                "title": "Temporal",
                "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
                "cited_text": "Durable execution...",
            }
        ],
    },
]
"""A reply that searched once, as the Messages API sends it."""


def message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 16,
            "server_tool_use": {"web_search_requests": 1},
        },
    }


def fake(replies: list[dict[str, Any]], bodies: list[dict[str, Any]]) -> AnthropicModel:
    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=replies[len(bodies) - 1])

    return AnthropicModel(KEY, http_client=sdk_client(httpx.MockTransport(handler)))


SEARCH_TOOL = {
    "name": "web_search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    "provider": "anthropic",
    "provider_options": {"max_uses": 2},
}


async def test_the_request_declares_the_server_tool_and_the_reply_keeps_its_blocks() -> None:
    bodies: list[dict[str, Any]] = []
    model = fake([message(copy.deepcopy(SEARCHED), "end_turn")], bodies)
    reply = await model.complete(
        ModelRequest(model="claude-x", system="", messages=[{"role": "user", "content": "hi"}],
                     tools=[SEARCH_TOOL], settings={"prompt_caching": False})
    )  # fmt: skip
    assert bodies[0]["tools"] == [
        {"type": "web_search_20250305", "max_uses": 2, "name": "web_search"}
    ]
    assert reply.tool_calls == []  # nothing for the workflow to run
    assert reply.content == "Let me search.Temporal runs code durably."
    assert reply.provider_calls == [
        {
            "id": "srvtoolu_01",
            "name": "web_search",
            "arguments": '{"query": "temporal durable execution"}',
            "provider": "anthropic",
            "result": "Temporal — https://temporal.io/",
            "is_error": False,
        }
    ]
    assert reply.message()["provider_content"] == {"anthropic": SEARCHED}


async def test_a_server_tool_error_is_an_error_result() -> None:
    blocks = [
        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "x"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "s1",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
        },
        {"type": "text", "text": "I could not search."},
    ]
    reply = await fake([message(blocks, "end_turn")], []).complete(
        ModelRequest(model="claude-x", system="", messages=[], tools=[SEARCH_TOOL])
    )
    assert reply.provider_calls[0]["result"] == "error: max_uses_exceeded"
    assert reply.provider_calls[0]["is_error"] is True


async def test_a_plain_reply_carries_no_provider_keys() -> None:
    # Runs without provider tools record the same messages as before.
    reply = await fake([message([{"type": "text", "text": "hi"}], "end_turn")], []).complete(
        ModelRequest(model="claude-x", system="", messages=[])
    )
    assert reply.message() == {"role": "assistant", "content": "hi"}


async def test_a_run_on_the_dev_server_schedules_no_activity_for_the_provider_tool(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    local_call = {
        "type": "tool_use",
        "id": "toolu_02",
        "name": "lookup",
        "input": {"order_id": "A-1"},
    }
    bodies: list[dict[str, Any]] = []
    model = fake(
        [
            message([*copy.deepcopy(SEARCHED), local_call], "tool_use"),
            message([{"type": "text", "text": "All done."}], "end_turn"),
        ],
        bodies,
    )
    folder = make_agent(tools={"web_search": SEARCH, "lookup": LOOKUP}, model="anthropic/claude-x")
    async with serve(
        client,
        [folder],
        environ={"ANTHROPIC_API_KEY": KEY},
        models={"anthropic/claude-x": model},
    ):
        handle = await toren_client.start_run(client, folder.name, "what is temporal?")
        result = await result_of(handle)
    assert result.text == "All done." and result.steps == 2
    assert result.tool_calls == 1  # the lookup; the search ran inside the model call

    # The first request declared the hosted tool beside the local one.
    assert {"type": "web_search_20250305", "max_uses": 2, "name": "web_search"} in bodies[0][
        "tools"
    ]
    assert sorted(t["name"] for t in bodies[0]["tools"]) == ["lookup", "web_search"]
    # The second sends the assistant turn back as it came, then the local tool's result.
    sent = bodies[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": [*SEARCHED, local_call]}
    assert sent[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_02",
            "content": "order A-1 shipped",
            "is_error": False,
            # The newest block is the prompt cache's rolling breakpoint (models/_anthropic_cache).
            "cache_control": {"type": "ephemeral"},
        }
    ]

    history = await fetch_history(client, handle.id)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert f"{folder.name}.lookup" in scheduled
    assert not [name for name in scheduled if name.endswith(".web_search")]
    assert f"{folder.name}.web_search" not in history.to_json()  # nor a local activity

    events = render(history)
    started = [e for e in events if e["type"] == "ToolCallStarted"]
    assert [(e["tool"], e.get("provider")) for e in started] == [
        ("web_search", "anthropic"),
        ("lookup", None),
    ]
    assert started[0]["args"] == {"query": "temporal durable execution"}
    done = next(e for e in events if e["type"] == "ToolCallCompleted" and e["tool"] == "web_search")
    assert done["result"] == "Temporal — https://temporal.io/" and not done["isError"]

    # The recorded spec says who runs the tool; and the history replays on this code.
    replayer = Replayer(
        workflows=[AgentRun],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)


async def test_a_plain_call_of_a_provider_tool_runs_nothing(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # A provider that (wrongly) hands back the hosted tool as an ordinary call: the workflow
    # answers it with an error result and schedules nothing.
    script = ScriptedModel(
        [{"tool_calls": [{"name": "web_search", "args": {"query": "x"}, "id": "c1"}]}, "ok"]
    )
    folder = make_agent(tools={"web_search": SEARCH}, model="anthropic/claude-x")
    async with serve(
        client,
        [folder],
        environ={"ANTHROPIC_API_KEY": KEY},
        models={"anthropic/claude-x": script},
    ):
        handle = await toren_client.start_run(client, folder.name, "search")
        assert (await result_of(handle)).text == "ok"
    history = await fetch_history(client, handle.id)
    assert not [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name.endswith("web_search")
    ]  # fmt: skip
    done = next(e for e in render(history) if e["type"] == "ToolCallCompleted")
    assert done["isError"]
    assert done["result"] == (
        "tool web_search is run by anthropic inside the model call, not by toren; nothing ran"
    )


def test_the_transcript_keeps_the_blocks_for_the_next_request() -> None:
    # A transcript recorded with a searched reply maps back to the same blocks.
    from toren.worker.models._anthropic import _messages

    assistant = {
        "role": "assistant",
        "content": "Let me search.Temporal runs code durably.",
        "provider_calls": [{"id": "srvtoolu_01", "name": "web_search"}],
        "provider_content": {"anthropic": SEARCHED},
    }
    out = _messages(
        [{"role": "user", "content": "q"}, assistant, {"role": "user", "content": "more"}]
    )
    assert out == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": SEARCHED},
        {"role": "user", "content": "more"},
    ]


async def test_a_paused_turn_is_continued_within_the_model_call() -> None:
    # Anthropic may pause a long server-tool turn (`pause_turn`): it is sent back as it is and
    # the model goes on; toren records the whole turn as one reply.
    bodies: list[dict[str, Any]] = []
    paused = copy.deepcopy(SEARCHED[:3])
    then = [{"type": "text", "text": "Found it."}]
    model = fake([message(paused, "pause_turn"), message(then, "end_turn")], bodies)
    reply = await model.complete(
        ModelRequest(model="claude-x", system="", messages=[{"role": "user", "content": "q"}],
                     tools=[SEARCH_TOOL], settings={"prompt_caching": False})
    )  # fmt: skip
    assert len(bodies) == 2
    assert bodies[1]["messages"][-1] == {"role": "assistant", "content": SEARCHED[:3]}
    assert reply.finish_reason == "stop" and reply.content == "Let me search.Found it."
    assert reply.provider_content == {"anthropic": [*SEARCHED[:3], *then]}
    assert [c["id"] for c in reply.provider_calls] == ["srvtoolu_01"]
    assert reply.usage == {"input_tokens": 20, "output_tokens": 32}
