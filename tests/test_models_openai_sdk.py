"""The OpenAI provider's Responses API and Azure OpenAI, through the `openai` SDK.

Hand-made wire exchanges (the shapes of OpenAI's API reference) answered by an httpx
`MockTransport` under the SDK; one run on the dev server with `api: responses` doing a tool
call; live calls that skip without credentials.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.conftest import fetch_history, result_of, secret
from toren import client as toren_client
from toren.client._events import render
from toren.errors import ConfigError, ModelHTTPError
from toren.worker import serve
from toren.worker.models import ModelRequest
from toren.worker.models._openai import AzureOpenAIModel, OpenAIModel

KEY = "sk-resp-4b1c9e0d7a2f"
RESPONSES = {"api": "responses"}
TOOLS = [{"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}]


class Recorder:
    """A transport handler that keeps every request and answers with `answer(request)`."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    @property
    def body(self) -> dict[str, Any]:
        return dict(json.loads(self.requests[-1].content))


def answering(status: int, body: Any, headers: dict[str, str] | None = None) -> Recorder:
    return Recorder(lambda request: httpx.Response(status, json=body, headers=headers or {}))


def response(output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_01",
        "object": "response",
        "status": "completed",
        "model": "gpt-5-mini-2025-08-07",
        "output": output,
        "usage": {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 64},
            "output_tokens": 9,
            "total_tokens": 129,
        },
        **extra,
    }


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_01", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def called(arguments: str, call_id: str = "call_7") -> dict[str, Any]:
    return {"type": "function_call", "id": "fc_01", "call_id": call_id, "name": "lookup",
            "arguments": arguments, "status": "completed"}  # fmt: skip


def ask(messages: list[dict[str, Any]] | None = None, **extra: Any) -> ModelRequest:
    return ModelRequest(
        model=extra.pop("model", "gpt-5-mini"),
        system="Be brief.",
        messages=messages or [{"role": "user", "content": "hi"}],
        settings=dict(RESPONSES),
        **extra,
    )


def openai(recorder: Recorder) -> OpenAIModel:
    return OpenAIModel(KEY, transport=httpx.MockTransport(recorder))


def error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


# -- the Responses API ------------------------------------------------------------------------


async def test_responses_text_reply_and_request() -> None:
    recorder = answering(200, response([said("Hi there.")]))
    reply = await openai(recorder).complete(ask(cache_key="support/run-1"))
    assert reply.content == "Hi there." and reply.tool_calls == []
    assert reply.finish_reason == "stop"
    assert reply.usage == {"input_tokens": 120, "output_tokens": 9, "cache_read_tokens": 64}
    request = recorder.requests[0]
    assert str(request.url) == "https://api.openai.com/v1/responses"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert recorder.body == {
        "model": "gpt-5-mini",
        "input": [{"role": "user", "content": "hi"}],
        "instructions": "Be brief.",
        "max_output_tokens": 4096,
        "store": False,
        "prompt_cache_key": "support/run-1",
    }


async def test_responses_tool_loop_sends_calls_and_results_as_items() -> None:
    recorder = answering(200, response([called('{"q": "x"}')]))
    reply = await openai(recorder).complete(ask(tools=TOOLS))
    assert reply.tool_calls == [{"id": "call_7", "name": "lookup", "arguments": '{"q": "x"}'}]
    assert reply.finish_reason == "tool_calls"
    assert recorder.body["tools"] == [
        {"type": "function", "name": "lookup", "description": "Look up.",
         "parameters": {"type": "object"}, "strict": False}
    ]  # fmt: skip
    transcript = [
        {"role": "user", "content": "hi"},
        reply.message(),
        {"role": "tool", "tool_call_id": "call_7", "name": "lookup", "content": "found"},
    ]
    await openai(recorder).complete(ask(transcript, tools=TOOLS))
    assert recorder.body["input"] == [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_7", "name": "lookup", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "call_7", "output": "found"},
    ]


async def test_responses_cut_reply_is_length_and_broken_arguments_go_back_as_braces() -> None:
    cut = response([called('{"q": "unfini')], status="incomplete",
                   incomplete_details={"reason": "max_output_tokens"})  # fmt: skip
    recorder = answering(200, cut)
    reply = await openai(recorder).complete(ask(tools=TOOLS))
    assert reply.finish_reason == "length"
    assert reply.tool_calls[0]["arguments"] == '{"q": "unfini'
    await openai(recorder).complete(ask([{"role": "user", "content": "hi"}, reply.message()]))
    assert recorder.body["input"][1]["arguments"] == "{}"


async def test_responses_streams_text_and_tool_call_deltas() -> None:
    final = response([said("Let me look."), called('{"q": "x"}')])
    events = [
        ("response.created", {"response": {**final, "status": "in_progress", "output": []}}),
        ("response.output_text.delta", {"output_index": 0, "delta": "Let me"}),
        ("response.output_text.delta", {"output_index": 0, "delta": " look."}),
        ("response.output_item.added",
         {"output_index": 1, "item": {**called(""), "status": "in_progress"}}),
        ("response.function_call_arguments.delta", {"output_index": 1, "delta": '{"q": '}),
        ("response.function_call_arguments.delta", {"output_index": 1, "delta": '"x"}'}),
        ("response.reasoning_summary_text.delta", {"output_index": 2, "delta": "ignored"}),
        ("response.completed", {"response": final}),
    ]  # fmt: skip
    stream = "".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n" for kind, data in events
    )
    recorder = Recorder(
        lambda request: httpx.Response(
            200, content=stream.encode(), headers={"content-type": "text/event-stream"}
        )
    )
    deltas: list[dict[str, Any]] = []
    reply = await openai(recorder).complete(ask(tools=TOOLS, on_delta=deltas.append))
    assert deltas == [
        {"type": "text_delta", "text": "Let me"},
        {"type": "text_delta", "text": " look."},
        {"type": "tool_call_delta", "index": 0, "id": "call_7", "name": "lookup", "arguments": ""},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '{"q": '},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '"x"}'},
    ]
    assert reply.content == "Let me look."
    assert reply.tool_calls == [{"id": "call_7", "name": "lookup", "arguments": '{"q": "x"}'}]
    assert recorder.body["stream"] is True and "stream_options" not in recorder.body
    assert recorder.requests[0].headers["accept"] == "text/event-stream"


async def test_a_responses_stream_cut_before_its_end_is_retryable() -> None:
    stream = 'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", '
    stream += '"output_index": 0, "delta": "Hel"}\n\n'
    recorder = Recorder(
        lambda request: httpx.Response(
            200, content=stream.encode(), headers={"content-type": "text/event-stream"}
        )
    )
    with pytest.raises(ModelHTTPError, match="no response.completed") as caught:
        await openai(recorder).complete(ask(on_delta=lambda delta: None))
    assert caught.value.retryable is True and caught.value.status is None


async def test_responses_typed_output_and_reasoning_effort() -> None:
    reasoning = {"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAA"}
    recorder = answering(200, response([reasoning, called("{}")]))
    request = ask(tools=TOOLS, output_schema={"type": "object"}, output_name="answer")
    request.settings["reasoning_effort"] = "low"
    reply = await openai(recorder).complete(request)
    body = recorder.body
    assert body["text"] == {"format": {"type": "json_schema", "name": "answer",
                                       "schema": {"type": "object"}, "strict": False}}  # fmt: skip
    assert body["reasoning"] == {"effort": "low"}
    assert body["include"] == ["reasoning.encrypted_content"]
    # The encrypted reasoning goes back before the turn's call, verbatim (store: false).
    kept = {"origin": "openai", "model": "gpt-5-mini", "items": [reasoning]}
    assert reply.provider_content == {"openai": kept}
    transcript = [{"role": "user", "content": "hi"}, reply.message()]
    await openai(recorder).complete(ask(transcript))
    assert recorder.body["input"][1:] == [
        reasoning,
        {"type": "function_call", "call_id": "call_7", "name": "lookup", "arguments": "{}"},
    ]


async def test_encrypted_reasoning_goes_back_only_to_its_origin_and_model() -> None:
    # Encrypted for OpenAI's o4-mini: Azure, a compatible server or another model refuse it.
    reasoning = {"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAA"}
    recorder = answering(200, response([reasoning, called("{}")]))
    request = ask(tools=TOOLS, model="o4-mini")
    request.settings["reasoning_effort"] = "low"
    reply = await openai(recorder).complete(request)
    transcript = [{"role": "user", "content": "hi"}, reply.message()]
    elsewhere = [
        ("o4-mini", AzureOpenAIModel("https://contoso.openai.azure.com", api_key="azk-1",
                                     transport=httpx.MockTransport(recorder))),
        ("o4-mini", OpenAIModel(KEY, base_url="http://127.0.0.1:9/v1",
                                transport=httpx.MockTransport(recorder))),
        ("gpt-5-mini", openai(recorder)),
        ("o4-mini", openai(recorder)),
    ]  # fmt: skip
    sent = []
    for model, provider in elsewhere:
        request = ask(transcript, model=model)
        request.settings["reasoning_effort"] = "low"
        await provider.complete(request)
        sent.append(recorder.body["input"][1:])
    call = {"type": "function_call", "call_id": "call_7", "name": "lookup", "arguments": "{}"}
    assert sent == [[call], [call], [call], [reasoning, call]]


async def test_chat_completions_takes_reasoning_effort_with_max_completion_tokens() -> None:
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}], "usage": {}}  # fmt: skip
    recorder = answering(200, chat)
    request = ask()
    request.settings = {"reasoning_effort": "minimal", "api": "chat"}
    assert (await openai(recorder).complete(request)).content == "ok"
    assert recorder.body["reasoning_effort"] == "minimal"
    assert recorder.body["max_completion_tokens"] == 4096 and "max_tokens" not in recorder.body
    assert "api" not in recorder.body


async def test_responses_429_waits_its_retry_after_and_is_not_retried_by_the_sdk() -> None:
    recorder = answering(429, error("Rate limit reached"), {"retry-after": "7"})
    with pytest.raises(ModelHTTPError) as caught:
        await openai(recorder).complete(ask())
    assert (caught.value.status, caught.value.retryable, caught.value.retry_after) == (429, True, 7)
    assert str(caught.value) == "OpenAI returned HTTP 429: Rate limit reached"
    assert len(recorder.requests) == 1


async def test_responses_500_is_retryable_and_401_is_not_and_hides_the_key() -> None:
    with pytest.raises(ModelHTTPError) as caught:
        await openai(answering(500, error("The server had an error"))).complete(ask())
    assert caught.value.status == 500 and caught.value.retryable is True
    refused = error(f"Incorrect API key provided: {KEY}.")
    with pytest.raises(ModelHTTPError) as caught:
        await openai(answering(401, refused)).complete(ask())
    assert caught.value.status == 401 and caught.value.retryable is False
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_a_prompt_too_long_on_the_responses_api_is_a_refusal() -> None:
    body = {"error": {"message": "Your input exceeds the context window of this model.",
                      "type": "invalid_request_error", "code": "context_length_exceeded"}}  # fmt: skip
    with pytest.raises(ModelHTTPError) as caught:
        await openai(answering(400, body)).complete(ask())
    assert type(caught.value).__name__ == "PromptTooLongError"
    assert caught.value.retryable is False


# -- agent.yaml -------------------------------------------------------------------------------


def test_api_and_reasoning_effort_are_openai_and_azure_only(
    make_agent: Callable[..., Path],
) -> None:
    from toren.worker._agent import load_agent

    settings = {"api": "responses", "reasoningEffort": "low"}
    assert load_agent(make_agent(model="azure/prod", modelSettings=settings)).config
    with pytest.raises(ConfigError) as caught:
        load_agent(make_agent(model="anthropic/claude-x", modelSettings=settings))
    assert "api: only openai/ and azure/ models take it" in str(caught.value)
    assert "reasoningEffort: only openai/ and azure/ models take it" in str(caught.value)
    with pytest.raises(ConfigError, match="seed: the Responses API"):
        load_agent(make_agent(model="openai/gpt-5", modelSettings={"api": "responses", "seed": 1}))
    with pytest.raises(ConfigError, match="reasoningEffort"):
        load_agent(make_agent(model="openai/gpt-5", modelSettings={"reasoningEffort": "max"}))


# -- a run on the dev server ------------------------------------------------------------------


async def test_a_responses_agent_calls_a_tool_on_the_dev_server(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    key = secret("sk-devserver-responses-7f3a")
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        assert request.url.path == "/v1/responses"
        if len(bodies) == 1:
            return httpx.Response(200, json=response([called('{"q": "order 42"}')]))
        return httpx.Response(200, json=response([said("Order 42 has shipped.")]))

    lookup = """
        from toren import define_tool
        tool = define_tool(
            description="Look up.",
            input={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            handler=lambda a, c: f"{a['q']}: shipped",
        )
    """
    folder = make_agent(
        tools={"lookup": lookup}, model="openai/gpt-5-mini", modelSettings={"api": "responses"}
    )
    model = OpenAIModel(key, transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"OPENAI_API_KEY": key}, models={"openai/gpt-5-mini": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "where is order 42?")
        assert (await result_of(handle)).text == "Order 42 has shipped."
    assert bodies[1]["input"][-2:] == [
        {"type": "function_call", "call_id": "call_7", "name": "lookup",
         "arguments": '{"q": "order 42"}'},
        {"type": "function_call_output", "call_id": "call_7", "output": "order 42: shipped"},
    ]  # fmt: skip
    events = render(await fetch_history(client, handle.id))
    finish = [e["finishReason"] for e in events if e["type"] == "LlmCallCompleted"]
    assert finish == ["tool_calls", "stop"]


# -- live -------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set")
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_live_openai(api: str) -> None:
    model = OpenAIModel(os.environ["OPENAI_API_KEY"])
    request = ModelRequest(
        model=os.environ.get("TOREN_LIVE_OPENAI_MODEL", "gpt-4o-mini"),
        system="Answer with one word.",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=32,
        settings={"api": api},
    )
    reply = await model.complete(request)
    assert reply.content and reply.usage["input_tokens"] > 0


async def test_an_injected_http_client_is_used_and_left_open() -> None:
    recorder = answering(200, response([{"type": "message", "content": "not a list"}]))
    async with httpx.AsyncClient(transport=httpx.MockTransport(recorder)) as http:
        model = OpenAIModel(KEY, http_client=http)
        with pytest.raises(ModelHTTPError, match="not a response") as caught:
            await model.complete(ask())
        assert caught.value.retryable is True
        recorder.answer = lambda request: httpx.Response(200, json=response([said("again")]))
        assert (await model.complete(ask())).content == "again"
        assert not http.is_closed and len(recorder.requests) == 2
