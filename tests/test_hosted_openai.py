"""OpenAI's hosted web search (Responses API) as a provider tool, through the SDK on MockTransport.

The request declares the Responses API's `web_search` tool (with the tool file's
`provider_options`) beside function tools; a reply's `web_search_call` items become
`provider_calls`; the stream's `response.web_search_call.*` events pass; Chat Completions is
refused at load; a run on the dev server records the search as a provider's call and replays.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.conftest import fetch_history, result_of, secret
from tests.test_models_openai_sdk import KEY, Recorder, answering, ask, called, response, said
from toren import AgentRun
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.errors import ConfigError
from toren.worker import serve
from toren.worker._tool_list import list_tools
from toren.worker.models._openai import AzureOpenAIModel, OpenAIModel

SEARCH = """
from toren import define_tool

tool = define_tool(
    description="Search the web.",
    execution_mode="provider",
    execution_provider="openai",
    provider_options={"search_context_size": "low"},
)
"""

LOOKUP = """
from toren import define_tool

tool = define_tool(
    description="Look an order up.",
    input={"type": "object", "properties": {"q": {"type": "string"}}},
    handler=lambda a, c: a["q"] + ": shipped",
)
"""

SEARCH_TOOL = {
    "name": "web_search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {}},
    "provider": "openai",
    "provider_options": {"search_context_size": "low"},
}
LOOKUP_TOOL = {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}

SEARCHED = {
    "type": "web_search_call",
    "id": "ws_01",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "temporal durable execution",
        "sources": [{"type": "url", "url": "https://temporal.io/"}],
    },
}
"""A search as the Responses API reports it, its sources asked for."""

REASONED = {"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAAA-x"}


async def test_the_request_declares_web_search_and_the_reply_records_the_search() -> None:
    recorder = answering(200, response([SEARCHED, said("Temporal runs code durably.")]))
    reply = await OpenAIModel(KEY, transport=httpx.MockTransport(recorder)).complete(
        ask(tools=[SEARCH_TOOL, LOOKUP_TOOL])
    )
    sent = recorder.body
    assert sent["tools"][0] == {"type": "web_search", "search_context_size": "low"}
    assert sent["tools"][1]["type"] == "function" and sent["tools"][1]["name"] == "lookup"
    assert sent["include"] == ["web_search_call.action.sources"]
    assert reply.content == "Temporal runs code durably." and reply.tool_calls == []
    assert reply.finish_reason == "stop"
    assert reply.provider_calls == [
        {
            "id": "ws_01",
            "name": "web_search",
            "arguments": json.dumps({"type": "search", "query": "temporal durable execution"}),
            "provider": "openai",
            "result": "https://temporal.io/",
            "is_error": False,
        }
    ]
    # Without reasoning items nothing goes back: the answer holds what the search found.
    assert reply.provider_content is None
    assert "provider_calls" in reply.message() and "provider_content" not in reply.message()


async def test_a_search_between_reasoning_items_goes_back_in_its_place() -> None:
    first = answering(200, response([REASONED, SEARCHED, called('{"q": "42"}')]))
    model = OpenAIModel(KEY, transport=httpx.MockTransport(first))
    request = ask(tools=[SEARCH_TOOL])
    request.settings["reasoning_effort"] = "low"
    reply = await model.complete(request)
    assert reply.provider_content == {
        "openai": {"origin": "openai", "model": "gpt-5-mini", "items": [REASONED, SEARCHED]}
    }
    assert first.body["include"] == [
        "reasoning.encrypted_content",
        "web_search_call.action.sources",
    ]
    transcript = [
        {"role": "user", "content": "hi"},
        reply.message(),
        {"role": "tool", "tool_call_id": "call_7", "name": "lookup", "content": "shipped"},
    ]
    then = answering(200, response([said("ok")]))
    await OpenAIModel(KEY, transport=httpx.MockTransport(then)).complete(ask(transcript))
    assert then.body["input"][1:4] == [
        REASONED,
        SEARCHED,
        {
            "type": "function_call",
            "call_id": "call_7",
            "name": "lookup",
            "arguments": '{"q": "42"}',
        },
    ]


async def test_a_streamed_search_passes_the_reader_and_is_recorded() -> None:
    final = response([SEARCHED, said("Found it.")])
    pending = {**SEARCHED, "status": "in_progress", "action": {"type": "search"}}
    events = [
        ("response.created", {"response": {**final, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"output_index": 0, "item": pending}),
        ("response.web_search_call.in_progress", {"output_index": 0, "item_id": "ws_01"}),
        ("response.web_search_call.searching", {"output_index": 0, "item_id": "ws_01"}),
        ("response.web_search_call.completed", {"output_index": 0, "item_id": "ws_01"}),
        ("response.output_item.done", {"output_index": 0, "item": SEARCHED}),
        ("response.output_text.delta", {"output_index": 1, "delta": "Found it."}),
        ("response.completed", {"response": final}),
    ]
    stream = "".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n" for kind, data in events
    )
    recorder = Recorder(
        lambda request: httpx.Response(
            200, content=stream.encode(), headers={"content-type": "text/event-stream"}
        )
    )
    deltas: list[dict[str, Any]] = []
    reply = await OpenAIModel(KEY, transport=httpx.MockTransport(recorder)).complete(
        ask(tools=[SEARCH_TOOL], on_delta=deltas.append)
    )
    assert deltas == [{"type": "text_delta", "text": "Found it."}]
    assert reply.content == "Found it."
    assert [call["result"] for call in reply.provider_calls] == ["https://temporal.io/"]


async def test_a_failed_search_is_an_error_result_on_azure_too() -> None:
    failed = {"type": "web_search_call", "id": "ws_02", "status": "failed",
              "action": {"type": "search", "query": "x"}}  # fmt: skip
    recorder = answering(200, response([failed, said("No luck.")]))
    azure = AzureOpenAIModel(
        "https://res.openai.azure.com", api_key=KEY, transport=httpx.MockTransport(recorder)
    )
    reply = await azure.complete(ask(tools=[{**SEARCH_TOOL, "provider": "azure"}]))
    assert recorder.body["tools"] == [{"type": "web_search", "search_context_size": "low"}]
    assert [(c["result"], c["is_error"]) for c in reply.provider_calls] == [("failed", True)]


@pytest.mark.parametrize("model", ["openai/gpt-5-mini", "azure/my-deployment"])
def test_chat_completions_refuses_it_at_load_and_responses_takes_it(
    make_agent: Callable[..., Path], model: str
) -> None:
    chat = make_agent(tools={"web_search": SEARCH}, model=model)
    with pytest.raises(ConfigError) as refused:
        list_tools(chat)
    text = str(refused.value)
    assert "cannot run it on Chat Completions" in text
    assert "set `modelSettings: {api: responses}`" in text
    responses = make_agent(
        tools={"web_search": SEARCH}, model=model, modelSettings={"api": "responses"}
    )
    assert [tool.name for tool in list_tools(responses)] == ["web_search"]


async def test_a_run_on_the_dev_server_records_the_search_and_replays(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    key = secret("sk-devserver-hosted-9c2e")
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            return httpx.Response(200, json=response([SEARCHED, called('{"q": "order 42"}')]))
        return httpx.Response(200, json=response([said("Order 42 has shipped.")]))

    folder = make_agent(
        tools={"web_search": SEARCH, "lookup": LOOKUP},
        model="openai/gpt-5-mini",
        modelSettings={"api": "responses"},
    )
    model = OpenAIModel(key, transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"OPENAI_API_KEY": key}, models={"openai/gpt-5-mini": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "where is order 42?")
        result = await result_of(handle)
    assert result.text == "Order 42 has shipped." and result.tool_calls == 1
    assert {"type": "web_search", "search_context_size": "low"} in bodies[0]["tools"]
    # The search is not sent back (no reasoning items to keep it company).
    assert not [item for item in bodies[1]["input"] if item.get("type") == "web_search_call"]

    history = await fetch_history(client, handle.id)
    assert f"{folder.name}.web_search" not in history.to_json()  # no activity for it
    events = render(history)
    started = [e for e in events if e["type"] == "ToolCallStarted"]
    assert [(e["tool"], e.get("provider")) for e in started] == [
        ("web_search", "openai"),
        ("lookup", None),
    ]
    assert started[0]["args"] == {"type": "search", "query": "temporal durable execution"}
    done = next(e for e in events if e["type"] == "ToolCallCompleted" and e["tool"] == "web_search")
    assert done["result"] == "https://temporal.io/" and not done["isError"]
    replayer = Replayer(
        workflows=[AgentRun],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)
