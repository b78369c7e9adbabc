"""Live output end to end: a fake OpenAI-compatible server streams SSE with pauses, a real run
publishes the deltas, and they reach a subscriber of `toren serve` (reconnecting with
`Last-Event-ID`) and of `toren.client.stream` before the model activity completes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from temporalio.client import Client

from tests.conftest import result_of, wait_for
from toren import client as toren_client
from toren.testing import free_port
from toren.web import create_app
from toren.web._auth import Token
from toren.worker import serve
from toren.worker.models._openai import OpenAIModel

PIECES = ["The order ", "shipped ", "on Monday ", "and arrives ", "tomorrow."]
PAUSE_S = 0.3


async def fake_openai(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Chat Completions, streamed: one piece of text every PAUSE_S, then usage and [DONE]."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = json.loads(await reader.readexactly(length))
    assert body["stream"] is True
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        data = {
            "id": "c1",
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            if delta or finish
            else [],
            **({"usage": usage} if usage else {}),
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    writer.write(chunk({"role": "assistant", "content": ""}))
    for piece in PIECES:
        await asyncio.sleep(PAUSE_S)
        writer.write(chunk({"content": piece}))
        await writer.drain()
    writer.write(chunk({}, "stop"))
    writer.write(chunk({}, usage={"prompt_tokens": 12, "completion_tokens": 9}))
    writer.write(b"data: [DONE]\n\n")
    await writer.drain()
    writer.close()


@pytest.fixture
async def provider() -> AsyncIterator[str]:
    port = free_port()
    server = await asyncio.start_server(fake_openai, "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}/v1"
    server.close()


@pytest.fixture
async def web(client: Client) -> AsyncIterator[str]:
    port = free_port()
    app = create_app(client, tokens=[Token("live-token", None)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, timeout=10)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


async def read_sse(
    http: httpx.AsyncClient, path: str, last_id: int | None, stop_after: int | None
) -> list[tuple[int, dict[str, Any], float]]:
    """(offset, item, arrival time) of each event, until the stream ends or `stop_after`."""
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    got: list[tuple[int, dict[str, Any], float]] = []
    offset: int | None = None
    async with http.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                offset = int(line[3:].strip())
            elif line.startswith("data:") and offset is not None:
                got.append((offset, json.loads(line[5:]), time.monotonic()))
                if stop_after is not None and len(got) >= stop_after:
                    break
    return got


async def test_streamed_text_reaches_an_sse_subscriber_before_the_call_completes(
    client: Client, make_agent: Callable[..., Path], provider: str, web: str
) -> None:
    folder = make_agent(model="openai/gpt-4o-mini", stream={"batchMs": 100})
    model = OpenAIModel("sk-live-test", base_url=provider)
    async with (
        serve(client, [folder], environ={"OPENAI_API_KEY": "sk-live-test"},
              models={"openai/gpt-4o-mini": model}),
        httpx.AsyncClient(base_url=web, headers={"Authorization": "Bearer live-token"},
                          timeout=30) as http,
    ):  # fmt: skip
        handle = await toren_client.start_run(client, folder.name, "Where is my order?")
        path = f"/v1/runs/{handle.id}/stream"
        # Read three items, drop the connection, resume from the last id seen.
        first = await read_sse(http, path, None, stop_after=3)
        rest = await read_sse(http, path, first[-1][0], stop_after=None)
        result = await result_of(handle)
        finished = time.monotonic()
        # The same stream through the Python client, from the start, after the run ended.
        live = toren_client.stream(client, handle.id)
        events = [e async for e in live]
    items = first + rest
    offsets = [o for o, _, _ in items]
    assert offsets == sorted(set(offsets)), "an item came twice or out of order"
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "an item was missed"
    deltas = [(item["text"], at) for _, item, at in items if item["type"] == "text_delta"]
    assert "".join(t for t, _ in deltas) == result.text == "".join(PIECES)
    # The first words arrived while the provider was still writing the rest.
    assert finished - deltas[0][1] > PAUSE_S * 2, finished - deltas[0][1]
    assert items[-1][1]["type"] == "run_completed"
    assert [e.offset for e in events] == offsets  # one stream, whoever reads it
    assert live.text == result.text
