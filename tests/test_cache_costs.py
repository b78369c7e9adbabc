"""Cache tokens in the budget (`toren.workflows._budget`): priced at their own prices, counted
as tokens, and a usage without them costs exactly what it always did; a run on a server that
caches records them, and `toren events` shows them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import result_of
from tests.test_budget_unit import reply, spec
from tests.test_budgets import ECHO
from toren import client as toren_client
from toren.agent._types import ModelCallResult, RunState
from toren.worker import serve
from toren.worker._prices import prices_for
from toren.workflows._budget import Budget, cost_usd

SONNET = [3.0, 15.0, 0.3, 3.75]


def test_cache_reads_and_writes_cost_their_own_prices() -> None:
    usage = {"input_tokens": 10_000, "output_tokens": 100, "cache_read_tokens": 8_000,
             "cache_write_tokens": 1_000}  # fmt: skip
    expected = (1_000 * 3.0 + 8_000 * 0.3 + 1_000 * 3.75 + 100 * 15.0) / 1e6
    assert cost_usd(usage, SONNET) == pytest.approx(expected, rel=1e-12)
    # Prices without cache prices (agent.yaml's) price cached tokens as input.
    assert cost_usd(usage, [3.0, 15.0]) == pytest.approx((10_000 * 3.0 + 100 * 15.0) / 1e6)


def test_a_usage_without_cache_tokens_costs_the_same_bits_as_before() -> None:
    usage = {"input_tokens": 1234, "output_tokens": 567}
    assert cost_usd(usage, SONNET) == (1234 * 3.0 + 567 * 15.0) / 1_000_000


def test_the_run_counts_cached_tokens_as_tokens_and_keeps_the_keys_only_when_used() -> None:
    run = RunState()
    budget = Budget(run)
    budget.after_call(spec(prices=SONNET), reply(1000, 100))
    assert run.usage == {"input_tokens": 1000, "output_tokens": 100}
    cached = ModelCallResult(
        message={"role": "assistant", "content": ""},
        usage={"input_tokens": 5000, "output_tokens": 10, "cache_read_tokens": 4000},
        earlier_usage={"input_tokens": 5000, "output_tokens": 10, "cache_write_tokens": 4000},
        attempt=2,
    )
    budget.after_call(spec(prices=SONNET), cached)
    assert run.usage == {"input_tokens": 11_000, "output_tokens": 120,
                         "cache_read_tokens": 4000, "cache_write_tokens": 4000}  # fmt: skip
    assert run.spent["tokens"] == 11_120  # every token read or written, cached or not
    assert run.spent["last_prompt"] == 5010
    budget.add_child({"input_tokens": 10, "output_tokens": 1, "cache_read_tokens": 5}, 0.001)
    assert run.usage["cache_read_tokens"] == 4005 and run.spent["tokens"] == 11_131


# -- a run against a local server that caches the way Anthropic does -------------------------

CACHED = {"cache_read_input_tokens": 1_000, "cache_creation_input_tokens": 100}


class _FakeAnthropic:
    """`POST /v1/messages`: a tool call, then an answer; each reply reports cache tokens."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                if len(fake.bodies) == 1:
                    content = [{"type": "tool_use", "id": "toolu_1", "name": "echo",
                                "input": {"text": "hi"}}]  # fmt: skip
                    stop = "tool_use"
                else:
                    content, stop = [{"type": "text", "text": "done"}], "end_turn"
                reply = {
                    "id": f"msg_{len(fake.bodies)}", "type": "message", "role": "assistant",
                    "model": body["model"], "content": content, "stop_reason": stop,
                    "usage": {"input_tokens": 20, "output_tokens": 10, **CACHED},
                }  # fmt: skip
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


async def test_a_run_records_and_prices_the_cache_tokens_its_provider_reported(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"echo": ECHO}, model="anthropic/claude-sonnet-4-20250514", stream=False
    )
    fake = _FakeAnthropic()
    environ = {"ANTHROPIC_API_KEY": "sk-ant-test-cache", "ANTHROPIC_BASE_URL": fake.url}
    try:
        async with serve(client, [folder], environ=environ):
            handle = await toren_client.start_run(client, folder.name, "go")
            result = await result_of(handle)
            events = await toren_client.events(client, handle.id)
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    # Every request marked its stable prefix for the cache, within the API's four marks.
    for body in fake.bodies:
        assert 1 <= json.dumps(body).count('"cache_control"') <= 4
    # The whole prompt is input; the cached part of it is counted too, and priced lower.
    assert result.usage["input_tokens"] == 2 * (20 + 1_000 + 100)
    assert result.usage["cache_read_tokens"] == 2_000
    assert result.usage["cache_write_tokens"] == 200
    prices = prices_for("anthropic/claude-sonnet-4-20250514", None)
    assert prices is not None and len(prices) == 4
    assert result.cost_usd == pytest.approx(cost_usd(result.usage, list(prices)))
    uncached = (result.usage["input_tokens"] * prices[0] + 20 * prices[1]) / 1e6
    assert result.cost_usd < 0.5 * uncached
    calls = [e for e in events if e["type"] == "LlmCallCompleted"]
    assert [c["usage"]["cache_read_tokens"] for c in calls] == [1_000, 1_000]
    receipt = next(e for e in events if e["type"] == "Receipt")
    assert (receipt["cacheReadTokens"], receipt["cacheWriteTokens"]) == (2_000, 200)
    assert receipt["costUSD"] == pytest.approx(result.cost_usd, abs=1e-6)
