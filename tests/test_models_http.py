"""The OpenAI and Anthropic providers against recorded-shaped replies on an httpx MockTransport."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from tests._sdk_http import sdk_client
from toren.worker._http import retry_after
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelHTTPError, ModelRequest
from toren.worker.models._openai import OpenAIModel

KEY = "sk-test-1234567890abcdef"
NO_CACHE = {"prompt_caching": False}
"""Settings for a test of the wire format without prompt caching (`tests/test_prompt_cache.py`)."""

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}

# A transcript with an assistant turn that called two tools, and both results.
TOOL_TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"id": "call_b", "name": "get_weather", "arguments": '{"city": "Oslo"'},
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "18C sunny"},
    {
        "role": "tool",
        "tool_call_id": "call_b",
        "name": "get_weather",
        "content": "invalid JSON arguments",
        "is_error": True,
    },
]

OPENAI_TEXT = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I help you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_06737a9306",
}

OPENAI_TOOL_CALL = {
    "id": "chatcmpl-AbC123toolcall",
    "object": "chat.completion",
    "created": 1741570290,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_12345xyz",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    "system_fingerprint": "fp_06737a9306",
}

ANTHROPIC_TEXT = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [{"type": "text", "text": "Hi! My name is Claude."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2095,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 503,
        "service_tier": "standard",
    },
}

ANTHROPIC_TOOL_USE = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "text", "text": "I'll check the weather in Paris."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"city": "Paris"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 384, "output_tokens": 71},
}


class Recorder:
    """A MockTransport handler that records requests and answers with a canned response."""

    def __init__(self, respond: Callable[[httpx.Request], httpx.Response]) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.respond(request)

    @property
    def body(self) -> Any:
        return json.loads(self.requests[-1].content)


def answering(status: int, body: Any = None, **kwargs: Any) -> Recorder:
    if body is None:
        return Recorder(lambda request: httpx.Response(status, **kwargs))
    return Recorder(lambda request: httpx.Response(status, json=body, **kwargs))


Provider = OpenAIModel | AnthropicModel


def openai(recorder: Recorder, base_url: str | None = None) -> OpenAIModel:
    return OpenAIModel(KEY, base_url=base_url, transport=httpx.MockTransport(recorder))


def anthropic(recorder: Recorder, base_url: str | None = None) -> AnthropicModel:
    return AnthropicModel(
        KEY, base_url=base_url, http_client=sdk_client(httpx.MockTransport(recorder))
    )


def hello() -> ModelRequest:
    return ModelRequest(
        model="some-model",
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
        settings=NO_CACHE,
    )


# OpenAI


async def test_openai_text_reply() -> None:
    recorder = answering(200, OPENAI_TEXT)
    reply = await openai(recorder).complete(hello())
    assert reply.content == "Hello! How can I help you today?"
    assert reply.tool_calls == []
    assert reply.usage == {"input_tokens": 19, "output_tokens": 10}
    assert reply.model == "gpt-4o-mini-2024-07-18"
    assert reply.finish_reason == "stop"
    request = recorder.requests[0]
    assert request.method == "POST"
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert recorder.body == {
        "model": "some-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 4096,
    }


async def test_openai_tool_call_reply() -> None:
    reply = await openai(answering(200, OPENAI_TOOL_CALL)).complete(hello())
    assert reply.content == ""
    assert reply.tool_calls == [
        {"id": "call_12345xyz", "name": "get_weather", "arguments": '{"city":"Paris"}'}
    ]
    assert reply.usage == {"input_tokens": 82, "output_tokens": 17}
    assert reply.finish_reason == "tool_calls"
    assert reply.message() == {
        "role": "assistant",
        "content": "",
        "tool_calls": reply.tool_calls,
    }


async def test_openai_request_shape_with_tools_and_results() -> None:
    recorder = answering(200, OPENAI_TEXT)
    request = ModelRequest(
        model="gpt-4o-mini",
        system="You are a weather bot.",
        messages=TOOL_TRANSCRIPT,
        tools=[WEATHER_TOOL],
        max_tokens=256,
        settings=NO_CACHE,
    )
    await openai(recorder).complete(request)
    assert recorder.body == {
        "model": "gpt-4o-mini",
        "max_tokens": 256,
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        # Not JSON (the model's reply was cut): a server that parses it, as
                        # llama.cpp does, would refuse every request; the tool result says why.
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "18C sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": "invalid JSON arguments"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER_TOOL["parameters"],
                },
            }
        ],
    }


async def test_model_settings_reach_both_request_bodies_only_when_set() -> None:
    settings = {"temperature": 0.0, "top_p": 0.9, "seed": 7, "stop": ["END"]}
    request = ModelRequest(
        model="m", system="", messages=[{"role": "user", "content": "hi"}], settings=settings
    )
    recorder = answering(200, OPENAI_TEXT)
    await openai(recorder).complete(request)
    assert {k: recorder.body[k] for k in settings} == settings
    recorder = answering(200, ANTHROPIC_TEXT)
    request.settings = {"temperature": 0.0, "top_p": 0.9, "stop": ["END"]}
    await anthropic(recorder).complete(request)
    assert recorder.body["temperature"] == 0.0 and recorder.body["top_p"] == 0.9
    assert recorder.body["stop_sequences"] == ["END"] and "stop" not in recorder.body
    for make, reply in ((openai, OPENAI_TEXT), (anthropic, ANTHROPIC_TEXT)):
        recorder = answering(200, reply)
        await make(recorder).complete(hello())
        assert not {"temperature", "top_p", "seed", "stop", "stop_sequences"} & set(recorder.body)


async def test_openai_tool_calls_without_text_send_null_content() -> None:
    recorder = answering(200, OPENAI_TEXT)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": "{}"}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "ok"},
    ]
    await openai(recorder).complete(ModelRequest(model="m", system="", messages=messages))
    sent = recorder.body["messages"]
    assert sent[0] == {"role": "user", "content": "hi"}  # no empty system message
    assert sent[1]["content"] is None


async def test_openai_base_url_override() -> None:
    recorder = answering(200, OPENAI_TEXT)
    await openai(recorder, base_url="http://localhost:11434/v1/").complete(hello())
    assert str(recorder.requests[0].url) == "http://localhost:11434/v1/chat/completions"


async def test_openai_empty_key_sends_no_authorization() -> None:
    recorder = answering(200, OPENAI_TEXT)
    model = OpenAIModel(
        "", base_url="http://localhost:8000/v1", transport=httpx.MockTransport(recorder)
    )
    await model.complete(hello())
    assert "authorization" not in recorder.requests[0].headers


# Anthropic


async def test_anthropic_text_reply() -> None:
    recorder = answering(200, ANTHROPIC_TEXT)
    reply = await anthropic(recorder).complete(hello())
    assert reply.content == "Hi! My name is Claude."
    assert reply.tool_calls == []
    assert reply.usage == {"input_tokens": 2095, "output_tokens": 503}
    assert reply.model == "claude-sonnet-4-20250514"
    assert reply.finish_reason == "stop"
    request = recorder.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert recorder.body == {
        "model": "some-model",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}],
    }


async def test_anthropic_tool_use_reply() -> None:
    reply = await anthropic(answering(200, ANTHROPIC_TOOL_USE)).complete(hello())
    assert reply.content == "I'll check the weather in Paris."
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["id"] == "toolu_01A09q90qw90lq917835lq9"
    assert call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert reply.usage == {"input_tokens": 384, "output_tokens": 71}
    assert reply.finish_reason == "tool_calls"


async def test_a_reply_cut_at_max_tokens_says_so_for_both_providers() -> None:
    # llama.cpp (recorded): `finish_reason: "length"` with a tool call whose arguments are "{".
    cut_openai = {
        **OPENAI_TOOL_CALL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{"},
                            "id": "lgpVQ1c52raEPjtzbj2dtIvEay717jA8",
                        }
                    ],
                },
            }
        ],
    }
    reply = await openai(answering(200, cut_openai)).complete(hello())
    assert reply.finish_reason == "length"
    assert reply.tool_calls[0]["arguments"] == "{"  # kept: the event log shows what came
    cut_anthropic = {**ANTHROPIC_TEXT, "stop_reason": "max_tokens"}
    assert (await anthropic(answering(200, cut_anthropic)).complete(hello())).finish_reason == (
        "length"
    )


async def test_anthropic_request_shape_groups_tool_results() -> None:
    recorder = answering(200, ANTHROPIC_TEXT)
    request = ModelRequest(
        model="claude-sonnet-4-20250514",
        system="You are a weather bot.",
        messages=[*TOOL_TRANSCRIPT, {"role": "user", "content": "Also Rome?"}],
        tools=[WEATHER_TOOL],
        max_tokens=256,
        settings=NO_CACHE,
    )
    await anthropic(recorder).complete(request)
    assert recorder.body == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 256,
        "system": "You are a weather bot.",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": "call_a",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    # The arguments were not valid JSON: {} keeps the conversation valid.
                    {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {}},
                ],
            },
            {
                # Both results, and the user's next words, in the one user turn.
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_a",
                        "content": "18C sunny",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_b",
                        "content": "invalid JSON arguments",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Also Rome?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": WEATHER_TOOL["parameters"],
            }
        ],
    }


async def test_anthropic_tool_calls_without_text_and_adjacent_user_messages() -> None:
    recorder = answering(200, ANTHROPIC_TEXT)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "toolu_1", "name": "get_weather", "arguments": "[1]"}],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "ok"},
    ]
    await anthropic(recorder).complete(
        ModelRequest(model="m", system="", messages=messages, settings=NO_CACHE)
    )
    body = recorder.body
    assert "system" not in body
    assert "tools" not in body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            # No empty text block; a non-object argument list becomes {}.
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "ok",
                    "is_error": False,
                }
            ],
        },
    ]


async def test_anthropic_base_url_override() -> None:
    recorder = answering(200, ANTHROPIC_TEXT)
    await anthropic(recorder, base_url="https://gateway.example.com/anthropic/").complete(hello())
    assert str(recorder.requests[0].url) == "https://gateway.example.com/anthropic/v1/messages"


async def test_anthropic_rejects_unknown_roles() -> None:
    # A `system` message joins the system prompt (tests/test_provider_portability.py).
    recorder = answering(200, ANTHROPIC_TEXT)
    request = ModelRequest(model="m", system="", messages=[{"role": "narrator", "content": "x"}])
    with pytest.raises(ValueError, match="role 'narrator'"):
        await anthropic(recorder).complete(request)
    assert recorder.requests == []


# Errors, both providers

OPENAI_ERRORS = {
    429: {
        "error": {
            "message": "Rate limit reached for gpt-4o-mini in organization org-abc on requests "
            "per min (RPM): Limit 3, Used 3, Requested 1.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    },
    500: {
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    },
    400: {
        "error": {
            "message": "Invalid 'messages[1].tool_calls[0].id': string too long.",
            "type": "invalid_request_error",
            "param": "messages[1].tool_calls[0].id",
            "code": "string_above_max_length",
        }
    },
    401: {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    },
}

ANTHROPIC_ERRORS = {
    429: {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "This request would exceed the rate limit for your organization.",
        },
    },
    500: {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}},
    400: {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.1.content.0.tool_use.input: Input should be a valid dictionary",
        },
    },
    401: {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    },
}

PROVIDERS: list[tuple[str, Callable[[Recorder], Provider], dict[int, Any]]] = [
    ("OpenAI", openai, OPENAI_ERRORS),
    ("Anthropic", anthropic, ANTHROPIC_ERRORS),
]
by_provider = pytest.mark.parametrize(
    ("name", "make", "errors"), PROVIDERS, ids=[name for name, _, _ in PROVIDERS]
)


@by_provider
async def test_429_with_retry_after_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    recorder = answering(429, errors[429], headers={"retry-after": "7"})
    with pytest.raises(ModelHTTPError) as caught:
        await make(recorder).complete(hello())
    error = caught.value
    assert error.status == 429
    assert error.retryable is True
    assert error.retry_after == 7.0
    assert name in str(error) and "429" in str(error)
    assert errors[429]["error"]["message"] in str(error)
    assert len(recorder.requests) == 1  # no client-side retry


@by_provider
async def test_500_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    recorder = answering(500, errors[500])
    with pytest.raises(ModelHTTPError) as caught:
        await make(recorder).complete(hello())
    assert caught.value.status == 500
    assert caught.value.retryable is True
    assert caught.value.retry_after is None
    assert len(recorder.requests) == 1


@by_provider
async def test_400_is_not_retryable_and_carries_the_message(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    with pytest.raises(ModelHTTPError) as caught:
        await make(answering(400, errors[400])).complete(hello())
    assert caught.value.status == 400
    assert caught.value.retryable is False
    assert str(caught.value) == f"{name} returned HTTP 400: {errors[400]['error']['message']}"


@by_provider
async def test_401_never_shows_the_key(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    with pytest.raises(ModelHTTPError) as caught:
        await make(answering(401, errors[401])).complete(hello())
    assert caught.value.status == 401
    assert caught.value.retryable is False
    assert KEY not in str(caught.value)
    assert KEY not in repr(caught.value)
    assert "[redacted]" in str(caught.value)


@by_provider
async def test_non_json_error_body_is_truncated(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    html = "<html><body>" + "Bad gateway " * 100 + "</body></html>"
    recorder = Recorder(lambda request: httpx.Response(502, text=html))
    with pytest.raises(ModelHTTPError) as caught:
        await make(recorder).complete(hello())
    assert caught.value.status == 502
    assert caught.value.retryable is True
    message = str(caught.value)
    assert message.startswith(f"{name} returned HTTP 502: <html><body>Bad gateway")
    assert len(message) < 360


@by_provider
async def test_connect_error_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ModelHTTPError) as caught:
        await make(Recorder(refuse)).complete(hello())
    assert caught.value.status is None
    assert caught.value.retryable is True
    assert "Connection refused" in str(caught.value)
    assert KEY not in str(caught.value)


@by_provider
async def test_timeout_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ModelHTTPError, match="timed out") as caught:
        await make(Recorder(slow)).complete(hello())
    assert caught.value.status is None
    assert caught.value.retryable is True


@by_provider
async def test_malformed_json_200_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    recorder = Recorder(
        lambda request: httpx.Response(
            200, text='{"id": "cut off', headers={"content-type": "application/json"}
        )
    )
    with pytest.raises(ModelHTTPError, match="not JSON") as caught:
        await make(recorder).complete(hello())
    assert caught.value.status is None
    assert caught.value.retryable is True


@by_provider
async def test_200_without_a_reply_is_retryable(
    name: str, make: Callable[[Recorder], Provider], errors: dict[int, Any]
) -> None:
    with pytest.raises(ModelHTTPError, match=name) as caught:
        await make(answering(200, {"id": "x", "object": "chat.completion"})).complete(hello())
    assert caught.value.status is None
    assert caught.value.retryable is True


async def test_200_with_an_error_object_shows_it() -> None:
    # vLLM and some proxies answer 200 with an error object instead of an error status.
    body = {"object": "error", "message": "model 'llama' does not exist", "code": 404}
    with pytest.raises(ModelHTTPError, match="model 'llama' does not exist"):
        await openai(answering(200, body)).complete(hello())


def test_retry_after_forms() -> None:
    assert retry_after(httpx.Headers({"retry-after": "7"})) == 7.0
    assert retry_after(httpx.Headers({"retry-after": "1.5"})) == 1.5
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "1"})) == 0.25
    assert retry_after(httpx.Headers({})) is None
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    seconds = retry_after(httpx.Headers({"retry-after": later}))
    assert seconds is not None and 25 <= seconds <= 30
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert retry_after(httpx.Headers({"retry-after": past})) == 0.0


def test_repr_hides_the_key() -> None:
    assert KEY not in repr(OpenAIModel(KEY))
    assert KEY not in repr(AnthropicModel(KEY))


@pytest.mark.parametrize("base_url", ["localhost:8000/v1", "http://"])
async def test_bad_base_url_is_not_retryable(base_url: str) -> None:
    model = OpenAIModel(KEY, base_url=base_url)
    with pytest.raises(ModelHTTPError) as caught:
        await model.complete(hello())
    assert caught.value.retryable is False
