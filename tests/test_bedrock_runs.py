"""`bedrock/` agents run through the workflow: on the dev server against a local Converse server,
and live against AWS when the worker has credentials and a region (skipped otherwise)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from tests._fake_bedrock import (
    FAKE_KEYS,
    FakeBedrock,
    Reply,
    message_stop,
    metadata,
    start,
    stop,
    stream_body,
    text_delta,
    tool_delta,
    tool_start,
)
from tests.conftest import history_bytes, result_of, secret
from tests.test_budgets import ECHO
from toren import client as toren_client
from toren.errors import ConfigError
from toren.worker import serve
from toren.worker._prices import prices_for
from toren.workflows._budget import cost_usd

MODEL = "bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0"


def _tool_call_stream() -> Reply:
    return stream_body(
        start(), tool_start(0, "tooluse_run1", "echo"), tool_delta(0, '{"text": "hi"}'), stop(0),
        message_stop("tool_use"), metadata(inputTokens=40, outputTokens=12),
    )  # fmt: skip


async def test_a_bedrock_agent_calls_a_tool_and_answers_on_the_dev_server(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"echo": ECHO}, model=MODEL)  # streams (the default)
    key = secret("fake-bedrock-secret-in-the-worker-env-9876")
    with FakeBedrock() as fake:
        fake.replies.append(_tool_call_stream())
        fake.replies.append(
            stream_body(start(), text_delta(0, "It said echo hi."), message_stop("end_turn"),
                        metadata(inputTokens=60, outputTokens=6))
        )  # fmt: skip
        environ = {
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": FAKE_KEYS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": key,
            "BEDROCK_ENDPOINT_URL": fake.url,
        }
        async with serve(client, [folder], environ=environ):
            handle = await toren_client.start_run(client, folder.name, "say hi through echo")
            result = await result_of(handle)
            history = await history_bytes(client, handle.id)
    assert result.text == "It said echo hi." and result.tool_calls == 1
    assert result.usage == {"input_tokens": 100, "output_tokens": 18}
    prices = prices_for(MODEL, None)
    assert prices is not None
    assert result.cost_usd == pytest.approx(cost_usd(result.usage, list(prices)))
    assert [r["path"].rsplit("/", 1)[1] for r in fake.requests] == ["converse-stream"] * 2
    # The tool's result went back as a toolResult for the call the stream made.
    second = fake.requests[1]["body"]["messages"]
    result_block = second[-1]["content"][0]["toolResult"]
    assert result_block["toolUseId"] == "tooluse_run1"
    assert "echo hi" in json.dumps(result_block["content"])
    # What the worker read from its environment stays on the worker.
    assert fake.url.encode() not in history and b"AKIAFAKEBEDROCKTEST1" not in history


LIVE_MODEL = os.environ.get("TOREN_BEDROCK_LIVE_MODEL", "us.amazon.nova-micro-v1:0")
"""The live run's model: Nova Micro (cheap, takes tools) unless the variable names another."""


def _live_credentials() -> str | None:
    """Why the live run cannot happen here, or None when it can."""
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        return "no AWS_REGION set (and AWS credentials with access to the model)"
    import botocore.session

    if botocore.session.get_session().get_credentials() is None:
        return "no AWS credentials found (AWS_ACCESS_KEY_ID, AWS_PROFILE or a role)"
    return None


async def test_live_bedrock_run(client: Client, make_agent: Callable[..., Path]) -> None:
    reason = _live_credentials()
    if reason:
        pytest.skip(f"live Bedrock run: {reason}")
    folder = make_agent(tools={"echo": ECHO}, model=f"bedrock/{LIVE_MODEL}", maxTokens=200)
    async with serve(client, [folder], environ=dict(os.environ)):
        handle = await toren_client.start_run(
            client, folder.name, "Call the echo tool with text 'hi', then tell me what it said."
        )
        result = await result_of(handle)
    assert result.tool_calls >= 1 and "hi" in result.text.lower()
    assert result.usage["input_tokens"] > 0


async def test_a_worker_without_an_aws_region_refuses_to_start(
    client: Client, make_agent: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    folder = make_agent(model=MODEL)
    with pytest.raises(ConfigError) as err:
        async with serve(client, [folder], environ={"AWS_ACCESS_KEY_ID": "AKIAX"}):
            pass
    assert any("need an AWS region: set AWS_REGION" in p for p in err.value.problems)
