"""`anthropic/` models through the official SDK, Anthropic faked at the HTTP boundary.

An `httpx2.MockTransport` (the SDK sends through `httpx2`) answers as the Messages API does:
text, a stream, a tool call, a cut reply, and the errors toren classifies (429 with
`retry-after`, 500, 529 overloaded, 401). One run goes through the real workflow on the dev
server; one calls the real API when `ANTHROPIC_API_KEY` is set.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from temporalio.client import Client

from tests.conftest import fetch_history, result_of
from toren import client as toren_client
from toren.agent._types import CUT_AT_MAX_TOKENS
from toren.client._events import render
from toren.worker import serve
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelHTTPError, ModelRequest

KEY = "sk-ant-api03-sdk-test-key"
Handler = Callable[[httpx2.Request], httpx2.Response]


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 100},
    }


def model(handler: Handler, seen: list[httpx2.Request] | None = None) -> AnthropicModel:
    def recorded(request: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen.append(request)
        return handler(request)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(recorded))
    return AnthropicModel(KEY, http_client=http)


def ask(on_delta: Callable[[dict[str, Any]], None] | None = None) -> ModelRequest:
    return ModelRequest(
        model="claude-sonnet-4-5",
        system="Be brief.",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "Weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        settings={"prompt_caching": False},
        on_delta=on_delta,
    )  # fmt: skip


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def test_text_reply_and_the_request_the_sdk_sent() -> None:
    seen: list[httpx2.Request] = []
    reply = await model(lambda r: httpx2.Response(200, json=message([
        {"type": "text", "text": "Sunny."}])), seen).complete(ask())  # fmt: skip
    assert reply.content == "Sunny." and reply.finish_reason == "stop"
    assert reply.usage == {"input_tokens": 112, "output_tokens": 5, "cache_read_tokens": 100}
    (request,) = seen
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == KEY and "authorization" not in request.headers
    assert request.headers["x-stainless-retry-count"] == "0"
    assert json.loads(request.content) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "get_weather", "description": "Weather.",
                   "input_schema": {"type": "object",
                                    "properties": {"city": {"type": "string"}}}}],
    }  # fmt: skip


async def test_tool_call_and_a_cut_reply() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    reply = await model(lambda r: httpx2.Response(200, json=message([call], "tool_use"))).complete(
        ask()
    )
    assert reply.tool_calls == [
        {"id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert reply.finish_reason == "tool_calls"
    cut = message([{"type": "text", "text": "The weather in Par"}], "max_tokens")
    reply = await model(lambda r: httpx2.Response(200, json=cut)).complete(ask())
    assert reply.finish_reason == CUT_AT_MAX_TOKENS == "length"


async def test_streaming_text_and_a_tool_call() -> None:
    start = {"type": "message_start", "message": {**message([]), "stop_reason": None,
                                                  "usage": {"input_tokens": 12}}}  # fmt: skip
    stream = b"".join([
        sse("message_start", start),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "text_delta", "text": "Checking."}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
            "type": "input_json_delta", "partial_json": '{"city": "Paris"}'}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                              "usage": {"output_tokens": 9}}),
        sse("message_stop", {"type": "message_stop"}),
    ])  # fmt: skip
    seen: list[httpx2.Request] = []
    deltas: list[dict[str, Any]] = []
    answer = httpx2.Response(200, content=stream, headers={"content-type": "text/event-stream"})
    reply = await model(lambda r: answer, seen).complete(ask(deltas.append))
    assert deltas == [
        {"type": "text_delta", "text": "Checking."},
        {"type": "tool_call_delta", "index": 0, "id": "toolu_1", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None,
         "arguments": '{"city": "Paris"}'},
    ]  # fmt: skip
    assert reply.content == "Checking." and reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0]["arguments"] == '{"city": "Paris"}'
    assert reply.usage == {"input_tokens": 12, "output_tokens": 9}
    assert json.loads(seen[0].content)["stream"] is True
    assert seen[0].headers["accept"] == "text/event-stream"


def error(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}}


@pytest.mark.parametrize(
    ("status", "body", "headers", "retryable", "wait"),
    [
        (429, error("rate_limit_error", "Rate limited"), {"retry-after": "7"}, True, 7.0),
        (500, error("api_error", "Internal server error"), {}, True, None),
        (529, error("overloaded_error", "Overloaded"), {}, True, None),
        (401, error("authentication_error", f"invalid x-api-key {KEY}"), {}, False, None),
    ],
    ids=["429", "500", "529", "401"],
)
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_errors_are_classified_once_never_retried_by_the_sdk(
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
    retryable: bool,
    wait: float | None,
    streamed: bool,
) -> None:
    seen: list[httpx2.Request] = []
    answer = model(lambda r: httpx2.Response(status, json=body, headers=headers), seen)
    with pytest.raises(ModelHTTPError) as caught:
        await answer.complete(ask((lambda d: None) if streamed else None))
    got = caught.value
    assert (got.status, got.retryable, got.retry_after) == (status, retryable, wait)
    shown = body["error"]["message"].replace(KEY, "[redacted]")
    assert str(got) == f"Anthropic returned HTTP {status}: {shown}"
    assert KEY not in str(got) and KEY not in repr(got)
    assert len(seen) == 1  # the SDK's own retries are off: Temporal decides


async def test_a_run_on_the_dev_server_calls_a_tool_through_the_sdk(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}
            return httpx2.Response(200, json=message([call], "tool_use"))
        return httpx2.Response(200, json=message([{"type": "text", "text": "found it"}]))

    lookup = """
        from toren import define_tool
        tool = define_tool(
            description="Look up.",
            input={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            handler=lambda a, c: "the answer",
        )
    """
    folder = make_agent(tools={"lookup": lookup}, model="anthropic/claude-x")
    async with serve(
        client,
        [folder],
        environ={"ANTHROPIC_API_KEY": KEY},
        models={"anthropic/claude-x": model(handler)},
    ):
        handle = await toren_client.start_run(client, folder.name, "look it up")
        assert (await result_of(handle)).text == "found it"
    result = bodies[1]["messages"][-1]["content"][0]
    assert (result["type"], result["tool_use_id"], result["content"]) == (
        "tool_result", "toolu_1", "the answer")  # fmt: skip
    events = render(await fetch_history(client, handle.id))
    assert [e["finishReason"] for e in events if e["type"] == "LlmCallCompleted"] == [
        "tool_calls",
        "stop",
    ]


@pytest.mark.skipif(
    not os.environ.get("ANTHROPIC_API_KEY"),
    reason="ANTHROPIC_API_KEY is not set: no live call to Anthropic",
)
async def test_live_call_to_anthropic() -> None:
    live = AnthropicModel(
        os.environ["ANTHROPIC_API_KEY"], base_url=os.environ.get("ANTHROPIC_BASE_URL") or None
    )
    request = ModelRequest(
        model=os.environ.get("TOREN_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5"),
        system="Answer with one word.",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=20,
    )
    deltas: list[dict[str, Any]] = []
    reply = await live.complete(dataclasses.replace(request, on_delta=deltas.append))
    assert reply.content and reply.usage["output_tokens"] > 0
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == reply.content


async def test_the_key_never_reaches_the_sdks_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    # The SDK logs each request's own options (its headers among them) at DEBUG: the key is a
    # client header, never a request's.
    answer = message([{"type": "text", "text": "hi"}])
    with caplog.at_level(logging.DEBUG, logger="anthropic"):
        await model(lambda r: httpx2.Response(200, json=answer)).complete(ask())
    assert "Request options" in caplog.text
    assert KEY not in caplog.text


@pytest.mark.parametrize("base_url", ["localhost:8000", "ftp://example.com"])
async def test_a_base_url_that_can_never_work_is_not_retried(base_url: str) -> None:
    with pytest.raises(ModelHTTPError, match="cannot call it") as caught:
        await AnthropicModel(KEY, base_url=base_url).complete(ask())
    assert caught.value.retryable is False
    assert str(caught.value).startswith(f"Anthropic-compatible server {base_url}: ")
