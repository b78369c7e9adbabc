"""The model activity on a real server: Temporal retries 429/5xx (honouring Retry-After), a 400
fails the run at once, every failed attempt shows in the event log, and a reply cut at
maxTokens is explained to the model. The providers are the real clients over an httpx
MockTransport."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.history.v1 import ActivityTaskStartedEventAttributes
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import default as default_converter

from tests._sdk_http import sdk_client
from tests.conftest import fetch_history, result_of, secret
from toren import client as toren_client
from toren.agent._attempts import attempts_before
from toren.client._events import format_event, render
from toren.worker import serve
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._openai import OpenAIModel


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


async def failed_run(
    client: Client, folder: Path, handler: Callable[[httpx.Request], httpx.Response]
) -> tuple[WorkflowFailureError, list[dict[str, Any]]]:
    """Run `folder` to its failure, its model answered by `handler`: the error and event log."""
    model = OpenAIModel("sk-x", transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"OPENAI_API_KEY": "sk-x"}, models={"openai/gpt-4o-mini": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "hi")
        with pytest.raises(WorkflowFailureError) as err:
            await result_of(handle)
    return err.value, render(await fetch_history(client, handle.id))


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
        result = await result_of(handle)
    assert result.text == "hello after retries"
    assert len(times) == 3
    assert times[1] - times[0] >= 2.9  # Retry-After: 3, not the 1 s first backoff
    history = await fetch_history(client, handle.id)
    assert key.encode() not in history.to_json().encode()
    # Temporal records only the last failure; toren's records show every failed attempt.
    model_events = [e for e in render(history) if e["type"].startswith("LlmCall")]
    assert [(e["type"], e.get("attempt"), e.get("status")) for e in model_events] == [
        ("LlmCallStarted", None, None),
        ("LlmCallFailed", 1, 429),
        ("LlmCallFailed", 2, 500),
        ("LlmCallCompleted", 3, None),
    ]
    assert all(e["maxAttempts"] == 10 for e in model_events if e["type"] == "LlmCallFailed")
    assert "Rate limit reached" in model_events[1]["error"]
    assert "HTTP 500: The server had an error" in model_events[2]["error"]
    assert model_events[1]["at"] < model_events[2]["at"] < model_events[3]["at"]


async def test_model_attempts_are_bounded_and_each_failure_is_logged(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(503, f"overloaded ({len(calls)})")

    folder = make_agent(
        model="openai/gpt-4o-mini",
        modelRetry={"maxAttempts": 3, "initialIntervalS": 0.1, "maxIntervalS": 0.2},
    )
    err, events = await failed_run(client, folder, handler)
    assert len(calls) == 3
    assert getattr(err.cause, "type", None) == "ModelCallFailed"
    failed = [e for e in events if e["type"] == "LlmCallFailed"]
    assert [(e["attempt"], e["maxAttempts"], e["status"]) for e in failed] == [
        (1, 3, 503), (2, 3, 503), (3, 3, 503),
    ]  # fmt: skip
    assert [f"overloaded ({n})" in e["error"] for n, e in enumerate(failed, 1)] == [True] * 3
    line = format_event(failed[1])
    assert "LlmCallFailed" in line and "step=1 attempt=2 maxAttempts=3 status=503 error=" in line
    assert events[-1]["type"] == "RunFailed"


async def test_400_fails_the_run_at_once(client: Client, make_agent: Callable[..., Path]) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return error(400, "Invalid 'messages[0].role': unknown role")

    err, events = await failed_run(client, make_agent(model="openai/gpt-4o-mini"), handler)
    assert len(calls) == 1
    assert getattr(err.cause, "type", None) == "ModelCallFailed"
    assert "unknown role" in str(err.cause)
    assert [e["type"] for e in events][-3:] == ["LlmCallFailed", "Receipt", "RunFailed"]
    receipt = events[-2]
    assert (receipt["calls"], receipt["retries"]) == (0, 1)  # one attempt, none answered
    assert (events[-3]["attempt"], events[-3]["status"]) == (1, 400)


def test_an_attempt_lost_with_its_worker_keeps_the_records_before_it() -> None:
    # A worker that dies mid-call fails its attempt by heartbeat timeout: no toren failure,
    # but the heartbeats carried the earlier attempts' records, and the timeout keeps them.
    earlier = [
        {"attempt": 1, "status": 500, "error": "HTTP 500: a", "at": "2026-01-01T00:00:01Z"},
        {"attempt": 2, "status": 429, "error": "HTTP 429: b", "at": "2026-01-01T00:00:03Z"},
    ]
    started = ActivityTaskStartedEventAttributes(attempt=4)
    started.last_failure.message = "activity Heartbeat timeout"
    details = started.last_failure.timeout_failure_info.last_heartbeat_details
    converter = default_converter().payload_converter
    details.payloads.extend(converter.to_payloads([earlier]))

    def decode(payloads: Any) -> list[Any]:
        return converter.from_payloads(list(payloads.payloads))

    records = attempts_before(started, decode)
    assert records == [
        *earlier,
        {"attempt": 3, "status": None, "error": started.last_failure.message},
    ]
    assert attempts_before(ActivityTaskStartedEventAttributes(attempt=1), decode) == []


async def test_an_anthropic_reply_cut_inside_a_tool_call_is_explained(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # Anthropic hands back a cut tool_use as an object (here an empty one), never broken JSON.
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            cut = {"type": "tool_use", "id": "toolu_cut", "name": "lookup", "input": {}}
            return httpx.Response(200, json=message([cut], "max_tokens"))
        return httpx.Response(200, json=message([{"type": "text", "text": "done"}], "end_turn"))

    lookup = """
        from toren import define_tool
        tool = define_tool(
            description="Look up.",
            input={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            handler=lambda a, c: "found",
        )
    """
    folder = make_agent(tools={"lookup": lookup}, model="anthropic/claude-x", maxTokens=16)
    model = AnthropicModel("sk-ant-x", http_client=sdk_client(httpx.MockTransport(handler)))
    async with serve(
        client,
        [folder],
        environ={"ANTHROPIC_API_KEY": "sk-ant-x"},
        models={"anthropic/claude-x": model},
    ):
        handle = await toren_client.start_run(client, folder.name, "look it up")
        assert (await result_of(handle)).text == "done"
    told = bodies[1]["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_cut" and told["is_error"]
    assert told["content"].startswith(
        "invalid arguments for lookup: your reply was cut at maxTokens=16 before these "
        "arguments were complete ('q' is a required property)"
    )
    events = render(await fetch_history(client, handle.id))
    finish = [e["finishReason"] for e in events if e["type"] == "LlmCallCompleted"]
    assert finish == ["length", "stop"]


def message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 10, "output_tokens": 16},
    }
