"""The OpenAI and Anthropic providers streaming their replies (server-sent events).

The services are faked at the HTTP boundary only: a local HTTP server (`asyncio.start_server`)
that writes SSE chunk by chunk with real pauses, where timing matters, and an httpx
`MockTransport` where it does not. The streamed reply is compared with what the non-streaming
path makes of the same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from tests._sdk_http import sdk_client
from tests.test_models_http import KEY, WEATHER_TOOL
from tests.test_provider_tools import SEARCHED
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelHTTPError, ModelReply, ModelRequest
from toren.worker.models._openai import OpenAIModel
from toren.worker.models._sse import ServerSentEvent, SSEParser

Delta = dict[str, Any]
Chunk = tuple[float, bytes]
"""Seconds to wait, then bytes to write (one HTTP chunk)."""


# -- the fake service's side ----------------------------------------------------------------


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is already text."""
    text = data if isinstance(data, str) else json.dumps(data)
    named = f"event: {event}\n" if event else ""
    return (named + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


class SSEServer:
    """A local HTTP/1.1 server answering each POST with `script`, chunk by chunk.

    `complete=False` drops the connection without the last (empty) chunk: a stream cut off.
    """

    def __init__(self, script: list[Chunk], *, complete: bool = True) -> None:
        self.script = script
        self.complete = complete
        self.bodies: list[dict[str, Any]] = []
        self.heads: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def __aenter__(self) -> SSEServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            found = re.search(r"content-length: (\d+)", head, re.I)
            assert found
            self.heads.append(head)
            self.bodies.append(json.loads(await reader.readexactly(int(found[1]))))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            for delay, data in self.script:
                await asyncio.sleep(delay)
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
            if self.complete:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def serving(script: list[Chunk], *, complete: bool = True) -> AsyncIterator[SSEServer]:
    async with SSEServer(script, complete=complete) as server:
        yield server


def replaying(body: bytes, status: int = 200, **headers: str) -> httpx.MockTransport:
    """A transport answering every request with `body` as an event stream."""
    return httpx.MockTransport(
        lambda request: httpx.Response(
            status, content=body, headers={"content-type": "text/event-stream", **headers}
        )
    )


# -- the caller's side ----------------------------------------------------------------------


class Deltas:
    """An `on_delta` that records each delta and when it came."""

    def __init__(self) -> None:
        self.seen: list[Delta] = []
        self.times: list[float] = []

    def __call__(self, delta: Delta) -> None:
        self.seen.append(delta)
        self.times.append(time.monotonic())

    @property
    def text(self) -> str:
        return "".join(d["text"] for d in self.seen if d["type"] == "text_delta")

    @property
    def calls(self) -> list[Delta]:
        return [d for d in self.seen if d["type"] == "tool_call_delta"]


def ask(on_delta: Callable[[Delta], None] | None, tools: bool = False) -> ModelRequest:
    return ModelRequest(
        model="some-model",
        system="Be brief.",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL] if tools else [],
        on_delta=on_delta,
    )


Provider = OpenAIModel | AnthropicModel


def make(name: str, *, base_url: str | None = None, **kwargs: Any) -> Provider:
    if name == "openai":
        return OpenAIModel(KEY, base_url=base_url, **kwargs)
    if "transport" in kwargs:  # the SDK sends through httpx2
        kwargs["http_client"] = sdk_client(kwargs.pop("transport"))
    return AnthropicModel(KEY, base_url=base_url, **kwargs)


async def unstreamed(name: str, body: dict[str, Any], tools: bool = False) -> ModelReply:
    """What the non-streaming path makes of `body`, the same answer sent whole."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    return await make(name, transport=transport).complete(ask(None, tools))


# -- OpenAI's wire format -------------------------------------------------------------------


def oa_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        None,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1741570283,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "usage": None,
        },
    )


def oa_usage(prompt: int, completion: int) -> bytes:
    return sse(
        None,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1741570283,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        },
    )  # fmt: skip


OA_DONE = b"data: [DONE]\n\n"


def oa_call(index: int, fragment: str, call_id: str | None = None) -> bytes:
    call: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
    if call_id:
        call.update(id=call_id, type="function")
        call["function"]["name"] = "get_weather"
    return oa_chunk({"tool_calls": [call]})


OA_TEXT = [
    oa_chunk({"role": "assistant", "content": "", "refusal": None}),
    oa_chunk({"content": "Hello!"}),
    oa_chunk({"content": " How can"}),
    oa_chunk({"content": " I help?"}),
    oa_chunk({}, finish="stop"),
    oa_usage(19, 10),
    OA_DONE,
]


def oa_whole(content: str | None, calls: list[tuple[str, str]], finish: str) -> dict[str, Any]:
    """The same answer as a non-streaming chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": a}}
            for i, a in calls
        ]
    return {
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 19, "completion_tokens": 10},
    }


# -- Anthropic's wire format ----------------------------------------------------------------


def an_start(input_tokens: int = 25) -> bytes:
    return sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-20250514",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1},
            },
        },
    )


def an_block(index: int, block: dict[str, Any]) -> bytes:
    return sse(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def an_delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def an_text(index: int, text: str) -> bytes:
    return an_delta(index, {"type": "text_delta", "text": text})


def an_json(index: int, fragment: str) -> bytes:
    return an_delta(index, {"type": "input_json_delta", "partial_json": fragment})


def an_stop(index: int) -> bytes:
    return sse("content_block_stop", {"type": "content_block_stop", "index": index})


def an_end(stop_reason: str, output_tokens: int = 15) -> list[bytes]:
    return [
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),  # fmt: skip
        sse("message_stop", {"type": "message_stop"}),
    ]


AN_PING = sse("ping", {"type": "ping"})

AN_TEXT = [
    an_start(),
    an_block(0, {"type": "text", "text": ""}),
    AN_PING,
    an_text(0, "Hello!"),
    an_text(0, " How can"),
    an_text(0, " I help?"),
    an_stop(0),
    *an_end("end_turn"),
]


def an_whole(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    """The same answer as a non-streaming message."""
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 25, "output_tokens": 15},
    }


TEXT_STREAMS = {"openai": OA_TEXT, "anthropic": AN_TEXT}
both = pytest.mark.parametrize("name", ["openai", "anthropic"])


# -- answers --------------------------------------------------------------------------------


@both
async def test_text_streams_before_the_reply_completes(name: str) -> None:
    script = [(0.0 if i == 0 else 0.1, chunk) for i, chunk in enumerate(TEXT_STREAMS[name])]
    deltas = Deltas()
    async with serving(script) as server:
        reply = await make(name, base_url=server.url).complete(ask(deltas))
        returned = time.monotonic()
    assert deltas.seen == [
        {"type": "text_delta", "text": "Hello!"},
        {"type": "text_delta", "text": " How can"},
        {"type": "text_delta", "text": " I help?"},
    ]
    assert deltas.text == reply.content == "Hello! How can I help?"
    # Each delta came as its chunk did (the server pauses 0.1 s before each), the first while
    # the server still had at least five chunks to write: not all at once at the end.
    assert returned - deltas.times[0] > 0.4
    assert all(later - earlier > 0.05 for earlier, later in itertools.pairwise(deltas.times))
    body, head = server.bodies[0], server.heads[0].lower()
    assert body["stream"] is True
    assert "accept: text/event-stream" in head
    assert KEY in head  # the key went out as usual
    if name == "openai":
        assert body["stream_options"] == {"include_usage": True}
        whole = oa_whole("Hello! How can I help?", [], "stop")
    else:
        assert "stream_options" not in body
        whole = an_whole([{"type": "text", "text": "Hello! How can I help?"}], "end_turn")
    assert reply == await unstreamed(name, whole)
    assert reply.usage == {
        "input_tokens": 19 if name == "openai" else 25,
        "output_tokens": 10 if name == "openai" else 15,
    }
    assert reply.finish_reason == "stop"


@both
async def test_without_on_delta_nothing_streams(name: str) -> None:
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        assert request.headers["accept"] == "application/json"
        whole = oa_whole("hi", [], "stop") if name == "openai" else an_whole([], "end_turn")
        return httpx.Response(200, json=whole)

    await make(name, transport=httpx.MockTransport(answer)).complete(ask(None))
    assert "stream" not in bodies[0] and "stream_options" not in bodies[0]


async def test_openai_tool_call_arguments_stream_in_fragments() -> None:
    stream = [
        oa_chunk({"role": "assistant", "content": None}),
        oa_call(0, "", call_id="call_12345xyz"),
        oa_call(0, '{"ci'),
        oa_call(0, 'ty": "Pa'),
        oa_call(0, 'ris"}'),
        oa_chunk({}, finish="tool_calls"),
        oa_usage(19, 10),
        OA_DONE,
    ]
    deltas = Deltas()
    reply = await make("openai", transport=replaying(b"".join(stream))).complete(ask(deltas, True))
    assert deltas.seen == [
        {"type": "tool_call_delta", "index": 0, "id": "call_12345xyz", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '{"ci'},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": 'ty": "Pa'},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": 'ris"}'},
    ]  # fmt: skip
    assert reply.tool_calls == [
        {"id": "call_12345xyz", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert reply.finish_reason == "tool_calls"
    whole = oa_whole(None, [("call_12345xyz", '{"city": "Paris"}')], "tool_calls")
    assert reply == await unstreamed("openai", whole, tools=True)


async def test_openai_several_tool_calls_and_text() -> None:
    stream = [
        oa_chunk({"role": "assistant", "content": "Checking"}),
        oa_chunk({"content": " both."}),
        oa_call(0, '{"city":', call_id="call_a"),
        oa_call(0, ' "Paris"}'),
        oa_call(1, "", call_id="call_b"),
        oa_call(1, '{"city": "Oslo"}'),
        oa_chunk({}, finish="tool_calls"),
        oa_usage(19, 10),
        OA_DONE,
    ]
    deltas = Deltas()
    reply = await make("openai", transport=replaying(b"".join(stream))).complete(ask(deltas, True))
    assert deltas.text == reply.content == "Checking both."
    assert [(d["index"], d["id"], d["name"], d["arguments"]) for d in deltas.calls] == [
        (0, "call_a", "get_weather", '{"city":'),
        (0, None, None, ' "Paris"}'),
        (1, "call_b", "get_weather", ""),
        (1, None, None, '{"city": "Oslo"}'),
    ]
    whole = oa_whole(
        "Checking both.", [("call_a", '{"city": "Paris"}'), ("call_b", '{"city": "Oslo"}')],
        "tool_calls",
    )  # fmt: skip
    assert reply == await unstreamed("openai", whole, tools=True)


async def test_anthropic_tool_use_input_streams_in_fragments() -> None:
    stream = [
        an_start(),
        an_block(0, {"type": "text", "text": ""}),
        an_text(0, "I'll check."),
        an_stop(0),
        an_block(1, {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}),
        an_json(1, ""),
        an_json(1, '{"ci'),
        an_json(1, 'ty": "Pa'),
        an_json(1, 'ris"}'),
        an_stop(1),
        *an_end("tool_use"),
    ]
    deltas = Deltas()
    model = make("anthropic", transport=replaying(b"".join(stream)))
    reply = await model.complete(ask(deltas, True))
    assert deltas.seen == [
        {"type": "text_delta", "text": "I'll check."},
        {"type": "tool_call_delta", "index": 0, "id": "toolu_01", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": '{"ci'},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": 'ty": "Pa'},
        {"type": "tool_call_delta", "index": 0, "id": None, "name": None, "arguments": 'ris"}'},
    ]  # fmt: skip
    whole = an_whole(
        [{"type": "text", "text": "I'll check."},
         {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}],
        "tool_use",
    )  # fmt: skip
    assert reply == await unstreamed("anthropic", whole, tools=True)
    assert reply.tool_calls == [
        {"id": "toolu_01", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert reply.finish_reason == "tool_calls"


async def test_anthropic_several_tool_uses_number_the_calls_not_the_blocks() -> None:
    stream = [
        an_start(),
        an_block(0, {"type": "text", "text": ""}),
        an_text(0, "Both."),
        an_stop(0),
        an_block(1, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}),
        an_json(1, '{"city": "Paris"}'),
        an_stop(1),
        an_block(2, {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}}),
        an_json(2, '{"city":'),
        an_json(2, ' "Oslo"}'),
        an_stop(2),
        *an_end("tool_use"),
    ]
    deltas = Deltas()
    model = make("anthropic", transport=replaying(b"".join(stream)))
    reply = await model.complete(ask(deltas, True))
    assert [(d["index"], d["id"], d["arguments"]) for d in deltas.calls] == [
        (0, "toolu_a", ""),
        (0, None, '{"city": "Paris"}'),
        (1, "toolu_b", ""),
        (1, None, '{"city":'),
        (1, None, ' "Oslo"}'),
    ]
    assert [c["arguments"] for c in reply.tool_calls] == ['{"city": "Paris"}', '{"city": "Oslo"}']
    whole = an_whole(
        [{"type": "text", "text": "Both."},
         {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
         {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Oslo"}}],
        "tool_use",
    )  # fmt: skip
    assert reply == await unstreamed("anthropic", whole, tools=True)


async def test_anthropic_server_tool_blocks_are_kept_as_the_unstreamed_reply_keeps_them() -> None:
    text0, use, result, cited = SEARCHED
    stream = [
        an_start(),
        an_block(0, {"type": "text", "text": ""}),
        an_text(0, text0["text"]),
        an_stop(0),
        an_block(1, {**use, "input": {}}),
        an_json(1, json.dumps(use["input"])[:10]),
        an_json(1, json.dumps(use["input"])[10:]),
        an_stop(1),
        an_block(2, result),
        an_stop(2),
        an_block(3, {"type": "text", "text": "", "citations": []}),
        an_delta(3, {"type": "citations_delta", "citation": cited["citations"][0]}),
        an_text(3, cited["text"]),
        an_stop(3),
        *an_end("end_turn"),
    ]
    deltas = Deltas()
    reply = await make("anthropic", transport=replaying(b"".join(stream))).complete(ask(deltas))
    assert deltas.calls == []  # the provider ran the search: no call for toren
    assert deltas.text == reply.content == text0["text"] + cited["text"]
    assert reply == await unstreamed("anthropic", an_whole(SEARCHED, "end_turn"))
    assert reply.provider_content == {"anthropic": SEARCHED}
    assert reply.provider_calls[0]["arguments"] == json.dumps(use["input"])


async def test_anthropic_input_cut_at_max_tokens_keeps_the_models_text() -> None:
    stream = [
        an_start(),
        an_block(0, {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}),
        an_json(0, '{"city": "Pa'),
        an_stop(0),
        *an_end("max_tokens"),
    ]
    reply = await make("anthropic", transport=replaying(b"".join(stream))).complete(
        ask(Deltas(), True)
    )
    assert reply.tool_calls == [
        {"id": "toolu_01", "name": "get_weather", "arguments": '{"city": "Pa'}
    ]
    assert reply.finish_reason == "length"


async def test_a_server_that_ignores_stream_still_feeds_on_delta() -> None:
    whole = oa_whole("Hi there.", [("call_a", '{"city": "Oslo"}')], "tool_calls")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=whole))
    deltas = Deltas()
    reply = await make("openai", transport=transport).complete(ask(deltas, True))
    assert reply == await unstreamed("openai", whole, tools=True)
    assert deltas.seen == [
        {"type": "text_delta", "text": "Hi there."},
        {"type": "tool_call_delta", "index": 0, "id": "call_a", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
    ]  # fmt: skip


# -- events toren ignores -------------------------------------------------------------------


async def test_openai_comments_and_named_events_are_ignored() -> None:
    stream = [b": keep-alive\n\n", sse("ping", {}), *OA_TEXT]
    deltas = Deltas()
    reply = await make("openai", transport=replaying(b"".join(stream))).complete(ask(deltas))
    assert reply.content == deltas.text == "Hello! How can I help?"


async def test_anthropic_ping_and_unknown_events_are_ignored() -> None:
    # Anthropic may add event types and asks clients to ignore those they do not know.
    stream = [AN_PING, *AN_TEXT[:3], sse("future_event", {"type": "future_event"}), *AN_TEXT[3:]]
    deltas = Deltas()
    reply = await make("anthropic", transport=replaying(b"".join(stream))).complete(ask(deltas))
    assert reply.content == deltas.text == "Hello! How can I help?"


async def test_anthropic_unknown_delta_on_a_block_toren_does_not_read_is_dropped() -> None:
    stream = [
        an_start(),
        an_block(0, {"type": "thinking", "thinking": ""}),
        an_delta(0, {"type": "future_thinking_delta", "x": 1}),
        an_stop(0),
        *AN_TEXT[1:],
    ]
    reply = await make("anthropic", transport=replaying(b"".join(stream))).complete(ask(Deltas()))
    assert reply.content == "Hello! How can I help?"


# -- streams that fail the call -------------------------------------------------------------


async def failure(name: str, stream: list[bytes], deltas: Deltas | None = None) -> ModelHTTPError:
    model = make(name, transport=replaying(b"".join(stream)))
    with pytest.raises(ModelHTTPError) as caught:
        await model.complete(ask(deltas or Deltas()))
    error = caught.value
    assert error.retryable is True
    assert error.status is None
    assert KEY not in str(error) and KEY not in repr(error)
    return error


@both
async def test_a_stream_ended_before_its_end_fails_retryably(name: str) -> None:
    deltas = Deltas()
    error = await failure(name, TEXT_STREAMS[name][:-1], deltas)
    end = "[DONE]" if name == "openai" else "message_stop"
    assert str(error) == (
        f"{'OpenAI' if name == 'openai' else 'Anthropic'} ended the stream before its end "
        f"(no `{'data: [DONE]' if name == 'openai' else 'message_stop'}`"
        f"{'' if name == 'openai' else ' event'})"
    )
    assert end in str(error)
    assert deltas.text == "Hello! How can I help?"  # seen, yet no reply came back


@both
async def test_a_connection_dropped_mid_stream_fails_retryably(name: str) -> None:
    script = [(0.0, chunk) for chunk in TEXT_STREAMS[name][:3]]
    async with serving(script, complete=False) as server:
        with pytest.raises(ModelHTTPError, match="broke off mid-stream") as caught:
            await make(name, base_url=server.url).complete(ask(Deltas()))
    assert caught.value.retryable is True
    assert KEY not in str(caught.value)


@both
async def test_a_stalled_stream_times_out_retryably(name: str) -> None:
    script = [(0.0, TEXT_STREAMS[name][0]), (0.0, TEXT_STREAMS[name][1]), (5.0, b"never")]
    deltas = Deltas()
    async with serving(script) as server:
        started = time.monotonic()
        with pytest.raises(ModelHTTPError, match="timed out mid-stream") as caught:
            await make(name, base_url=server.url, timeout=0.3).complete(ask(deltas))
    assert time.monotonic() - started < 1.5
    assert caught.value.retryable is True


@both
async def test_invalid_json_in_a_data_line_fails_retryably(name: str) -> None:
    broken = b'data: {"choices": [{"delta": {"content": "x"\n\n'
    if name == "anthropic":
        broken = b'event: content_block_delta\ndata: {"type": "content_bl\n\n'
    stream = [*TEXT_STREAMS[name][:2], broken, *TEXT_STREAMS[name][2:]]
    error = await failure(name, stream)
    assert "whose data is not JSON" in str(error)


@both
async def test_the_key_never_appears_in_a_stream_error(name: str) -> None:
    leaky = f"data: {{'key': '{KEY}'\n\n".encode()
    if name == "anthropic":
        leaky = f"event: message_delta\ndata: {{'key': '{KEY}'\n\n".encode()
    error = await failure(name, [*TEXT_STREAMS[name][:2], leaky])
    assert "[redacted]" in str(error)


async def test_openai_error_in_the_stream_fails_retryably() -> None:
    error_chunk = sse(None, {"error": {"message": f"The server had an error (key {KEY})",
                                       "type": "server_error"}})  # fmt: skip
    error = await failure("openai", [*OA_TEXT[:2], error_chunk, *OA_TEXT[2:]])
    assert str(error) == "OpenAI sent an error mid-stream: The server had an error (key [redacted])"
    named = sse("error", {"error": {"message": "overloaded"}})
    error = await failure("openai", [*OA_TEXT[:2], named])
    assert str(error) == "OpenAI sent an error event mid-stream: overloaded"


async def test_anthropic_error_event_fails_retryably() -> None:
    overloaded = sse(
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": f"Overloaded {KEY}"}},
    )
    deltas = Deltas()
    error = await failure("anthropic", [*AN_TEXT[:4], overloaded, *AN_TEXT[4:]], deltas)
    assert str(error) == (
        "Anthropic sent an error event mid-stream: overloaded_error: Overloaded [redacted]"
    )
    assert deltas.text == "Hello!"


async def test_openai_data_that_is_no_chunk_fails_retryably() -> None:
    # It may hold part of the answer in a shape toren does not know: not safe to skip.
    odd = sse(None, {"object": "chat.completion.delta.v2", "delta": {"text": "Hello"}})
    error = await failure("openai", [*OA_TEXT[:2], odd, *OA_TEXT[2:]])
    assert str(error) == (
        "OpenAI sent a data event that is not a chat completion chunk (keys ['delta', 'object'])"
    )


async def test_anthropic_unknown_delta_on_a_text_block_fails_retryably() -> None:
    odd = an_delta(0, {"type": "rich_text_delta", "text": "Hello"})
    error = await failure("anthropic", [*AN_TEXT[:3], odd, *AN_TEXT[3:]])
    assert str(error) == (
        "Anthropic sent a 'rich_text_delta' delta for a 'text' block, which toren cannot read"
    )


async def test_anthropic_events_of_the_wrong_shape_fail_retryably() -> None:
    stray = an_text(7, "x")  # a block that never started
    error = await failure("anthropic", [*AN_TEXT[:3], stray, *AN_TEXT[3:]])
    assert "content_block_delta" in str(error) and "streamed message" in str(error)


# -- errors before the stream ---------------------------------------------------------------


@both
async def test_429_before_the_stream_keeps_retry_after(name: str) -> None:
    bodies: list[dict[str, Any]] = []

    def limited(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            429, json={"error": {"message": "Rate limit reached"}}, headers={"retry-after": "7"}
        )

    with pytest.raises(ModelHTTPError) as caught:
        await make(name, transport=httpx.MockTransport(limited)).complete(ask(Deltas()))
    error = caught.value
    assert (error.status, error.retryable, error.retry_after) == (429, True, 7.0)
    label = "OpenAI" if name == "openai" else "Anthropic"
    assert str(error) == f"{label} returned HTTP 429: Rate limit reached"
    assert bodies[0]["stream"] is True
    assert len(bodies) == 1


@both
async def test_401_before_the_stream_is_not_retryable_and_hides_the_key(name: str) -> None:
    body = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    transport = httpx.MockTransport(lambda request: httpx.Response(401, json=body))
    with pytest.raises(ModelHTTPError) as caught:
        await make(name, transport=transport).complete(ask(Deltas()))
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


@both
async def test_connection_refused_before_the_stream_is_retryable(name: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ModelHTTPError, match="could not be reached") as caught:
        await make(name, transport=httpx.MockTransport(refuse)).complete(ask(Deltas()))
    assert caught.value.retryable is True


# -- the SSE parser -------------------------------------------------------------------------


def parsed(lines: list[str]) -> list[ServerSentEvent]:
    parser = SSEParser()
    return [e for e in map(parser.feed, lines) if e is not None]


def test_sse_parser_follows_the_standard() -> None:
    lines = [
        "\ufeff: a comment first",
        "event: update",
        "data: line one",
        "data:line two",
        "id: 7",
        "retry: 1000",
        "",
        "",  # a blank line after nothing dispatches nothing
        ": keep-alive",
        "",
        "data",
        "",
        "data: {}",
        "",
        "event: lost",
        "data: cut off",  # no blank line: the stream ended inside it
    ]
    assert parsed(lines) == [
        ServerSentEvent("update", "line one\nline two"),
        ServerSentEvent("message", ""),
        ServerSentEvent("message", "{}"),
    ]


async def test_a_body_that_is_no_reply_never_shows_the_key() -> None:
    # A compatible server answering 200 with an error object, though asked to stream.
    body = {"error": {"message": f"bad key {KEY}"}}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    with pytest.raises(ModelHTTPError, match="not a chat completion") as caught:
        await make("openai", transport=transport).complete(ask(Deltas()))
    assert caught.value.retryable is True
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_anthropic_paused_turn_streams_on_and_numbers_calls_across_both_parts() -> None:
    def use(index: int, call_id: str, city: str) -> list[bytes]:
        return [
            an_block(
                index, {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {}}
            ),
            an_json(index, json.dumps({"city": city})),
            an_stop(index),
        ]

    parts = [
        [an_start(), an_block(0, {"type": "text", "text": "One."}), an_stop(0),
         *use(1, "toolu_a", "Paris"), *an_end("pause_turn")],
        [an_start(), an_block(0, {"type": "text", "text": ""}), an_text(0, " Two."), an_stop(0),
         *use(1, "toolu_b", "Oslo"), *an_end("tool_use")],
    ]  # fmt: skip
    bodies: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        stream = b"".join(parts[len(bodies) - 1])
        return httpx.Response(200, content=stream, headers={"content-type": "text/event-stream"})

    deltas = Deltas()
    model = make("anthropic", transport=httpx.MockTransport(answer))
    reply = await model.complete(ask(deltas, True))
    assert len(bodies) == 2 and all(b["stream"] for b in bodies)
    assert deltas.text == reply.content == "One. Two."
    assert [(d["index"], d["id"]) for d in deltas.calls] == [
        (0, "toolu_a"), (0, None), (1, "toolu_b"), (1, None)
    ]  # fmt: skip
    assert [c["id"] for c in reply.tool_calls] == ["toolu_a", "toolu_b"]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == {"input_tokens": 50, "output_tokens": 30}
