"""The Gemini provider (`gemini/<model>`) through Google's own SDK, on an httpx MockTransport.

The SDK builds the HTTP request and reads the reply; the transport stands in for
generativelanguage.googleapis.com with replies shaped as the Gemini API sends them. One run goes
through the real workflow on the dev server; one calls the live API when `GEMINI_API_KEY` is set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toren import PromptTooLongError
from toren.worker.models._base import ModelHTTPError, ModelRequest
from toren.worker.models._gemini import GeminiModel

KEY = "AIzaSyTEST-gemini-0123456789abcdef"
MODEL = "gemini-2.5-flash"
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}

HI = [{"role": "user", "content": "hi"}]
Handler = Callable[[httpx.Request], httpx.Response]


def reply(parts: list[dict[str, Any]], finish: str | None = "STOP", **usage: int) -> dict[str, Any]:
    """A `GenerateContentResponse` body as the API sends it (camelCase)."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage or {"promptTokenCount": 12, "candidatesTokenCount": 3},
        "modelVersion": "gemini-2.5-flash-001",
    }


def sse(*chunks: dict[str, Any]) -> httpx.Response:
    body = "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks)
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


def model(answers: list[httpx.Response], seen: list[httpx.Request]) -> GeminiModel:
    """A provider whose HTTP calls get `answers` in turn; each request lands in `seen`."""

    def handle(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        return answers[len(seen) - 1]

    return GeminiModel(KEY, transport=httpx.MockTransport(handle))


def body(request: httpx.Request) -> dict[str, Any]:
    """The request's JSON, its keys in camelCase (the SDK writes a few nested ones in
    snake_case, which the API takes as well)."""
    return _camel(json.loads(request.content))


def _camel(value: Any) -> Any:
    if isinstance(value, list):
        return [_camel(item) for item in value]
    if not isinstance(value, dict) or "type" in value and "properties" in value:
        return value  # a JSON Schema is sent as it is
    return {re.sub(r"_([a-z])", lambda m: m[1].upper(), k): _camel(v) for k, v in value.items()}


async def test_a_text_reply_and_the_request_it_answers() -> None:
    seen: list[httpx.Request] = []
    answer = reply(
        [{"text": "Hello "}, {"text": "there."}],
        promptTokenCount=40,
        cachedContentTokenCount=32,
        candidatesTokenCount=5,
        thoughtsTokenCount=7,
    )
    got = await model([httpx.Response(200, json=answer)], seen).complete(
        ModelRequest(
            model=MODEL,
            system="Be brief.",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=256,
            settings={
                "temperature": 0,
                "top_p": 0.5,
                "seed": 7,
                "stop": ["END"],
                "prompt_caching": True,
                "thinking_budget_tokens": 1024,
            },
        )  # fmt: skip
    )
    assert got.content == "Hello there." and got.finish_reason == "stop" and not got.tool_calls
    # The prompt count holds its cached part; thinking is billed as output.
    assert got.usage == {"input_tokens": 40, "output_tokens": 12, "cache_read_tokens": 32}
    assert got.model == "gemini-2.5-flash-001" and got.provider_content is None

    request = seen[0]
    assert request.url.path.endswith(f"/models/{MODEL}:generateContent")
    assert request.headers["x-goog-api-key"] == KEY
    sent = body(request)
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert sent["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    config = sent["generationConfig"]
    assert {k: config[k] for k in ("temperature", "topP", "seed", "stopSequences")} == {
        "temperature": 0, "topP": 0.5, "seed": 7, "stopSequences": ["END"]
    }  # fmt: skip
    assert config["maxOutputTokens"] == 256
    assert config["thinkingConfig"] == {"thinkingBudget": 1024}
    assert "promptCaching" not in json.dumps(sent) and "prompt_caching" not in json.dumps(sent)


async def test_a_streamed_reply_gives_its_text_and_calls_as_deltas() -> None:
    seen: list[httpx.Request] = []
    deltas: list[dict[str, Any]] = []
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
    got = await model(
        [
            sse(
                reply([{"text": "Let me "}], finish=None),
                reply([{"text": "check."}], finish=None),
                reply([call], promptTokenCount=20, candidatesTokenCount=9),
            )
        ],
        seen,
    ).complete(
        ModelRequest(
            model=MODEL,
            system="",
            messages=[{"role": "user", "content": "Oslo?"}],
            tools=[WEATHER],
            on_delta=deltas.append,
        )  # fmt: skip
    )
    assert seen[0].url.path.endswith(":streamGenerateContent")
    assert seen[0].url.params["alt"] == "sse"
    assert got.content == "Let me check." and got.finish_reason == "tool_calls"
    assert got.usage == {"input_tokens": 20, "output_tokens": 9}
    [made] = got.tool_calls
    assert made["name"] == "get_weather" and json.loads(made["arguments"]) == {"city": "Oslo"}
    assert deltas == [
        {"type": "text_delta", "text": "Let me "},
        {"type": "text_delta", "text": "check."},
        {"type": "tool_call_delta", "index": 0, "id": made["id"], "name": "get_weather",
         "arguments": made["arguments"]},
    ]  # fmt: skip


async def test_a_stream_cut_before_its_finish_reason_is_retryable() -> None:
    seen: list[httpx.Request] = []
    provider = model([sse(reply([{"text": "Half"}], finish=None))], seen)
    with pytest.raises(ModelHTTPError) as err:
        await provider.complete(
            ModelRequest(model=MODEL, system="", messages=HI, on_delta=lambda d: None)
        )
    assert err.value.retryable and "finishReason" in str(err.value)


async def test_a_tool_call_goes_back_with_its_result_keyed_by_name() -> None:
    seen: list[httpx.Request] = []
    calls = [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
         "thoughtSignature": "c2lnbmF0dXJlLTE="},
        {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
    ]  # fmt: skip
    first = httpx.Response(200, json=reply(calls))
    provider = model([first, httpx.Response(200, json=reply(calls)), _ok("Both mild.")], seen)
    asked = ModelRequest(
        model=MODEL, system="", messages=[{"role": "user", "content": "Paris, Oslo?"}],
        tools=[WEATHER],
    )  # fmt: skip
    got = await provider.complete(asked)
    assert got.finish_reason == "tool_calls"
    assert [json.loads(c["arguments"]) for c in got.tool_calls] == [
        {"city": "Paris"}, {"city": "Oslo"}
    ]  # fmt: skip
    # Gemini sends no ids: toren's are stable (the same reply gets the same) and distinct.
    again = await provider.complete(asked)
    assert [c["id"] for c in again.tool_calls] == [c["id"] for c in got.tool_calls]
    assert len({c["id"] for c in got.tool_calls}) == 2
    # A signed reply is kept verbatim, for the next request.
    assert got.provider_content is not None
    assert got.provider_content["gemini"]["parts"][0]["thought_signature"] == "c2lnbmF0dXJlLTE="
    declared = body(seen[0])["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "get_weather"
    # The JSON Schema as it is, `additionalProperties` included (no conversion).
    assert declared["parametersJsonSchema"] == WEATHER["parameters"]

    paris, oslo = got.tool_calls
    answered = await provider.complete(
        ModelRequest(
            model=MODEL,
            system="",
            tools=[WEATHER],
            messages=[
                *asked.messages,
                got.message(),
                {
                    "role": "tool",
                    "tool_call_id": paris["id"],
                    "name": "get_weather",
                    "content": "18C",
                },
                {
                    "role": "tool",
                    "tool_call_id": oslo["id"],
                    "name": "get_weather",
                    "content": "no such city",
                    "is_error": True,
                },
            ],
        )  # fmt: skip
    )
    assert answered.content == "Both mild."
    contents = body(seen[2])["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"][0]["thoughtSignature"] == "c2lnbmF0dXJlLTE="
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
        {"functionResponse": {"name": "get_weather", "response": {"error": "no such city"}}},
    ]


async def test_an_id_the_model_sent_is_kept_and_sent_back() -> None:
    seen: list[httpx.Request] = []
    call = {"functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Rome"}}}
    provider = model([httpx.Response(200, json=reply([call])), _ok("Warm.")], seen)
    got = await provider.complete(ModelRequest(model=MODEL, system="", messages=HI))
    assert got.tool_calls[0]["id"] == "fc-1" and got.provider_content is None
    result = {"role": "tool", "tool_call_id": "fc-1", "name": "get_weather", "content": "25C"}
    await provider.complete(
        ModelRequest(model=MODEL, system="", messages=[*HI, got.message(), result])
    )
    contents = body(seen[1])["contents"]
    assert contents[1]["parts"][0]["functionCall"]["id"] == "fc-1"
    assert contents[2]["parts"][0]["functionResponse"]["id"] == "fc-1"


@pytest.mark.parametrize(
    ("finish", "expected"),
    [("MAX_TOKENS", "length"), ("SAFETY", "safety"), ("RECITATION", "recitation")],
)
async def test_a_cut_or_stopped_reply_says_why(finish: str, expected: str) -> None:
    got = await model(
        [httpx.Response(200, json=reply([{"text": "Once upon"}], finish))], []
    ).complete(ModelRequest(model=MODEL, system="", messages=HI))
    assert got.content == "Once upon" and got.finish_reason == expected


async def test_a_typed_output_asks_for_json_natively() -> None:
    seen: list[httpx.Request] = []
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    await model([_ok('{"ok": true}')], seen).complete(
        ModelRequest(model=MODEL, system="", messages=HI, output_schema=schema)
    )
    config = body(seen[0])["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema


def _error(status: int, code: str, message: str, **kwargs: Any) -> httpx.Response:
    details = kwargs.pop("details", [])
    payload = {"error": {"code": status, "message": message, "status": code, "details": details}}
    return httpx.Response(status, json=payload, **kwargs)


def _ok(text: str) -> httpx.Response:
    return httpx.Response(200, json=reply([{"text": text}]))


async def _failure(answer: httpx.Response, *, streamed: bool = False) -> ModelHTTPError:
    request = ModelRequest(model=MODEL, system="", messages=[{"role": "user", "content": "hi"}])
    if streamed:
        request.on_delta = lambda delta: None
    with pytest.raises(ModelHTTPError) as err:
        await model([answer], []).complete(request)
    return err.value


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_429_waits_its_retry_after(streamed: bool) -> None:
    error = await _failure(
        _error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", headers={"Retry-After": "7"}),
        streamed=streamed,
    )
    assert error.status == 429 and error.retryable and error.retry_after == 7
    assert "RESOURCE_EXHAUSTED" in str(error)


async def test_a_429_without_the_header_waits_its_retry_info() -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "21s"}
    error = await _failure(_error(429, "RESOURCE_EXHAUSTED", "Quota", details=[retry_info]))
    assert error.retryable and error.retry_after == 21


async def test_a_500_is_retryable() -> None:
    error = await _failure(_error(500, "INTERNAL", "An internal error has occurred."))
    assert error.status == 500 and error.retryable


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_other_client_errors_fail_at_once_and_never_show_the_key(status: int) -> None:
    # Google's auth errors quote nothing secret, but a proxy might: the key is redacted.
    error = await _failure(_error(status, "PERMISSION_DENIED", f"API key {KEY} is not valid"))
    assert error.status == status and not error.retryable
    assert KEY not in str(error) and "PERMISSION_DENIED" in str(error)


async def test_a_prompt_over_the_window_is_prompt_too_long() -> None:
    said = "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    error = await _failure(_error(400, "INVALID_ARGUMENT", said))
    assert isinstance(error, PromptTooLongError) and not error.retryable
    assert (error.window, error.prompt_tokens) == (1048576, 1200000)


async def test_an_unreachable_server_is_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    provider = GeminiModel(KEY, transport=httpx.MockTransport(refuse))
    with pytest.raises(ModelHTTPError) as err:
        await provider.complete(ModelRequest(model=MODEL, system="", messages=HI))
    assert err.value.retryable and "could not be reached" in str(err.value)


async def test_a_blocked_prompt_says_so() -> None:
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 4},
    }
    got = await model([httpx.Response(200, json=blocked)], []).complete(
        ModelRequest(model=MODEL, system="", messages=HI)
    )
    assert (got.content, got.finish_reason) == ("", "prompt_blocked_safety")


class _BrokenStream(httpx.AsyncByteStream):
    async def __aiter__(self) -> Any:
        yield f"data: {json.dumps(reply([{'text': 'Hel'}], finish=None))}\r\n\r\n".encode()
        raise httpx.ReadError("peer closed the connection")


async def test_a_stream_broken_off_or_failing_midway_is_retryable() -> None:
    broken = httpx.Response(
        200, stream=_BrokenStream(), headers={"content-type": "text/event-stream"}
    )
    error = await _failure(broken, streamed=True)
    assert error.retryable and "broke off mid-stream" in str(error)
    overloaded = {
        "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    }
    error = await _failure(sse(reply([{"text": "Hel"}], finish=None), overloaded), streamed=True)
    assert error.retryable and error.status == 503 and "overloaded" in str(error)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_reply_that_is_not_json_is_retryable(streamed: bool) -> None:
    page = httpx.Response(
        200, text="<html>proxy error</html>", headers={"content-type": "text/html"}
    )
    error = await _failure(page, streamed=streamed)
    assert error.retryable and error.status is None and "not JSON" in str(error)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_malformed_function_call_is_a_retryable_error_never_an_answer(
    streamed: bool,
) -> None:
    said = "Malformed function call: print(default_api.get_weather(city=Paris)"
    malformed = {
        "candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL", "finishMessage": said}],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 0},
    }
    answer = sse(malformed) if streamed else httpx.Response(200, json=malformed)
    request = ModelRequest(model=MODEL, system="", messages=HI, tools=[WEATHER])
    if streamed:
        request.on_delta = lambda delta: None
    with pytest.raises(ModelHTTPError) as err:
        await model([answer], []).complete(request)
    assert err.value.retryable and err.value.status is None
    assert "MALFORMED_FUNCTION_CALL" in str(err.value)
