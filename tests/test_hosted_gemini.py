"""Gemini's Google Search grounding as the provider tool `web_search`, through the SDK on MockTransport.

The request carries the `google_search` tool (with the tool file's `provider_options`); the
reply's `groundingMetadata` becomes one provider call (the queries, the pages); streamed too;
an agent that mixes it with local tools is refused at load (Gemini refuses the mix); a run on
the dev server records the search as a provider's call and replays.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.conftest import fetch_history, result_of, secret
from tests.test_models_gemini import HI, MODEL, body, model, reply, sse
from toren import AgentRun
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.errors import ConfigError
from toren.worker import serve
from toren.worker._tool_list import list_tools
from toren.worker.models._base import ModelRequest
from toren.worker.models._gemini import GeminiModel
from toren.worker.models._gemini_wire import request_arguments
from toren.worker.models._output import ask_for_output

SEARCH = """
from toren import define_tool

tool = define_tool(
    description="Search the web.",
    execution_mode="provider",
    execution_provider="gemini",
    provider_options={"time_range_filter": {"start_time": "2026-01-01T00:00:00Z",
                                           "end_time": "2026-12-01T00:00:00Z"}},
)
"""

LOOKUP = """
from toren import define_tool

tool = define_tool(description="Look up.", handler=lambda a, c: "shipped")
"""

RANGE = {"start_time": "2026-01-01T00:00:00Z", "end_time": "2026-12-01T00:00:00Z"}
SENT = [
    {
        "googleSearch": {
            # The SDK writes the times as datetimes.
            "timeRangeFilter": {
                "startTime": "2026-01-01T00:00:00+00:00",
                "endTime": "2026-12-01T00:00:00+00:00",
            }
        }
    }
]
SEARCH_TOOL = {
    "name": "web_search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {}},
    "provider": "gemini",
    "provider_options": {"time_range_filter": RANGE},
}

GROUNDED = {
    "webSearchQueries": ["temporal durable execution"],
    "groundingChunks": [
        {"web": {"uri": "https://vertexaisearch.cloud.google.com/r/1", "title": "temporal.io"}},
        {
            "web": {
                "uri": "https://vertexaisearch.cloud.google.com/r/2",
                "title": "docs.temporal.io",
            }
        },
    ],
    "searchEntryPoint": {"renderedContent": "<div>…</div>"},
}
"""Grounding metadata as the Gemini API sends it."""


def grounded(text: str) -> dict[str, Any]:
    answer = reply([{"text": text}])
    answer["candidates"][0]["groundingMetadata"] = GROUNDED
    return answer


SEARCHED = {
    "name": "web_search",
    "arguments": json.dumps({"queries": ["temporal durable execution"]}),
    "provider": "gemini",
    "result": "temporal.io — https://vertexaisearch.cloud.google.com/r/1\n"
    "docs.temporal.io — https://vertexaisearch.cloud.google.com/r/2",
    "is_error": False,
}


async def test_the_request_carries_google_search_and_the_reply_records_the_search() -> None:
    seen: list[httpx.Request] = []
    gemini = model([httpx.Response(200, json=grounded("Temporal runs code durably."))], seen)
    answer = await gemini.complete(
        ModelRequest(model=MODEL, system="", messages=HI, tools=[SEARCH_TOOL])
    )
    assert body(seen[0])["tools"] == SENT
    assert answer.content == "Temporal runs code durably." and answer.tool_calls == []
    [call] = answer.provider_calls
    assert call["id"].startswith("toren-gs-")
    assert {k: v for k, v in call.items() if k != "id"} == SEARCHED
    assert answer.provider_content is None  # nothing goes back: the answer holds it


async def test_a_streamed_grounded_reply_is_recorded() -> None:
    last = grounded(" durably.")
    seen: list[httpx.Request] = []
    gemini = model([sse(reply([{"text": "Temporal runs code"}], finish=None), last)], seen)
    deltas: list[dict[str, Any]] = []
    answer = await gemini.complete(
        ModelRequest(
            model=MODEL, system="", messages=HI, tools=[SEARCH_TOOL], on_delta=deltas.append
        )
    )
    assert [d["text"] for d in deltas] == ["Temporal runs code", " durably."]
    assert [c["result"] for c in answer.provider_calls] == [SEARCHED["result"]]


async def test_a_reply_without_grounding_has_no_provider_call() -> None:
    seen: list[httpx.Request] = []
    gemini = model([httpx.Response(200, json=reply([{"text": "2"}]))], seen)
    answer = await gemini.complete(
        ModelRequest(model=MODEL, system="", messages=HI, tools=[SEARCH_TOOL])
    )
    assert answer.provider_calls == [] and "provider_calls" not in answer.message()


def test_a_request_mixing_it_with_function_tools_is_refused_before_it_is_sent() -> None:
    lookup = {"name": "lookup", "description": "", "parameters": {"type": "object"}}
    request = ModelRequest(model=MODEL, system="", messages=HI, tools=[SEARCH_TOOL, lookup])
    with pytest.raises(ValueError, match="Tool use with function calling is unsupported"):
        request_arguments(request)


@pytest.mark.parametrize("served", ["gemini/gemini-2.5-flash", "vertex/gemini-2.5-flash"])
def test_the_agent_is_refused_at_load_when_it_has_local_tools_too(
    make_agent: Callable[..., Path], served: str
) -> None:
    mixed = make_agent(tools={"web_search": SEARCH, "lookup": LOOKUP}, model=served)
    with pytest.raises(ConfigError) as refused:
        list_tools(mixed)
    assert "Gemini refuses Google Search grounding beside function declarations" in str(
        refused.value
    )
    assert "local tools (lookup)" in str(refused.value)
    alone = make_agent(tools={"web_search": SEARCH}, model=served, name="alone")
    assert [tool.name for tool in list_tools(alone)] == ["web_search"]


async def test_a_run_on_the_dev_server_records_the_search_and_replays(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    key = secret("AIzaSyDEVSERVER-hosted-5b1d")
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(body(request))
        return httpx.Response(200, json=grounded("Temporal runs code durably."))

    folder = make_agent(tools={"web_search": SEARCH}, model=f"gemini/{MODEL}")
    gemini = GeminiModel(key, transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"GEMINI_API_KEY": key}, models={f"gemini/{MODEL}": gemini}
    ):
        handle = await toren_client.start_run(client, folder.name, "what is temporal?")
        result = await result_of(handle)
    assert result.text == "Temporal runs code durably." and result.tool_calls == 0
    assert bodies[0]["tools"] == SENT

    history = await fetch_history(client, handle.id)
    assert f"{folder.name}.web_search" not in history.to_json()  # no activity for it
    events = render(history)
    started = [e for e in events if e["type"] == "ToolCallStarted"]
    assert [(e["tool"], e.get("provider")) for e in started] == [("web_search", "gemini")]
    assert started[0]["args"] == {"queries": ["temporal durable execution"]}
    done = next(e for e in events if e["type"] == "ToolCallCompleted")
    assert done["result"] == SEARCHED["result"] and not done["isError"]
    replayer = Replayer(
        workflows=[AgentRun],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)


def test_a_typed_output_beside_the_search_is_asked_for_in_the_prompt() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = ModelRequest(model=MODEL, system="Be brief.", messages=HI, tools=[SEARCH_TOOL])
    asked, _ = ask_for_output(request, schema, "output", "auto", "vertex")
    assert asked.tools == [SEARCH_TOOL] and asked.output_schema is None
    assert json.dumps(schema) in asked.system
    contents, config = request_arguments(asked)  # sendable: no function beside the search
    assert "response_json_schema" not in config
    # Without the search, auto is still the `final_output` tool.
    plain, _ = ask_for_output(dataclasses.replace(request, tools=[]), schema, "output", "auto",
                              "gemini")  # fmt: skip
    assert [tool["name"] for tool in plain.tools] == ["final_output"]
