"""Cache tokens in the budget (`toren.workflows._budget`): priced at their own prices, counted
as tokens, and a usage without them costs exactly what it always did."""

from __future__ import annotations

import pytest

from tests.test_budget_unit import reply, spec
from toren.agent._types import ModelCallResult, RunState
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
