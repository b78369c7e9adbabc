"""The model activity on a real server: Temporal retries 429/5xx (honouring Retry-After), a 400
fails the run at once. The provider is the real OpenAI client over an httpx MockTransport."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import fetch_history, secret
from toren import client as toren_client
from toren._events import render
from toren.models._openai import OpenAIModel
from toren.worker import serve


def completion(text: str) -> dict[str, object]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1764680000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


def error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"error": {"message": message, "type": "error", "param": None, "code": None}}
    return httpx.Response(status, json=body, headers=headers or {})


async def test_429_and_500_are_retried_honouring_retry_after(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    key = secret("sk-test-9c41d0b7e2")
    times: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        if len(times) == 1:
            return error(429, "Rate limit reached", {"retry-after": "3"})
        if len(times) == 2:
            return error(500, "The server had an error")
        return httpx.Response(200, json=completion("hello after retries"))

    folder = make_agent(model="openai/gpt-4o-mini")
    model = OpenAIModel(key, transport=httpx.MockTransport(handler))
    environ = {"OPENAI_API_KEY": key}
    async with serve(client, [folder], environ=environ, models={"openai/gpt-4o-mini": model}):
        handle = await toren_client.start_run(client, folder.name, "hi")
        result = await handle.result()
    assert result.text == "hello after retries"
    assert len(times) == 3
    assert times[1] - times[0] >= 2.9  # Retry-After: 3, not the 1 s first backoff
    history = await fetch_history(client, handle.id)
    assert key.encode() not in history.to_json().encode()


async def test_400_fails_the_run_at_once(client: Client, make_agent: Callable[..., Path]) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(400, "Invalid 'messages[0].role': unknown role")

    folder = make_agent(model="openai/gpt-4o-mini")
    model = OpenAIModel("sk-x", transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"OPENAI_API_KEY": "sk-x"}, models={"openai/gpt-4o-mini": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "hi")
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    assert len(calls) == 1
    assert getattr(err.value.cause, "type", None) == "ModelCallFailed"
    assert "unknown role" in str(err.value.cause)
    events = render(await fetch_history(client, handle.id))
    assert [e["type"] for e in events][-2:] == ["LlmCallFailed", "RunFailed"]
