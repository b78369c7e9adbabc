"""`toren.workflows._budget` on its own: the exact sums and the edges of each budget.

Pure and fast (no server), so mutation testing can run it on every mutant of the module
(`tests/mutation.md`); `tests/test_budgets.py` shows the same rules on a real run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from toren.agent._spec import AgentSpec
from toren.agent._types import ModelCallResult, RunState
from toren.errors import RunError
from toren.workflows._budget import CHARS_PER_TOKEN, Budget, fresh_spending


def spec(**kwargs: Any) -> AgentSpec:
    return AgentSpec(name="a", model="mock/scripted", tools=[], **kwargs)


def reply(inp: int, out: int, attempt: int = 1, **earlier: int) -> ModelCallResult:
    return ModelCallResult(
        message={"role": "assistant", "content": ""},
        usage={"input_tokens": inp, "output_tokens": out},
        earlier_usage=dict(earlier),
        attempt=attempt,
    )


def tool_message(chars: int) -> dict[str, Any]:
    """A message whose JSON is exactly `chars` characters long."""
    base = {"role": "tool", "content": ""}
    message = {"role": "tool", "content": "x" * (chars - len(json.dumps(base)))}
    assert len(json.dumps(message)) == chars
    return message


def test_a_fresh_run_has_spent_nothing() -> None:
    assert fresh_spending() == {
        "tokens": 0, "cost_usd": 0.0, "calls": 0, "retries": 0, "last_prompt": 0,
    }  # fmt: skip
    run = RunState()
    Budget(run)
    assert run.spent == fresh_spending()
    run.spent["tokens"] = 7
    Budget(run)  # a continued run keeps what it spent
    assert run.spent["tokens"] == 7
    assert CHARS_PER_TOKEN == 4


def test_a_call_counts_its_usage_its_lost_attempts_and_its_cost() -> None:
    run = RunState()
    budget = Budget(run)
    priced = spec(prices=[2.0, 10.0])
    budget.after_call(priced, reply(1000, 100, attempt=3, input_tokens=500, output_tokens=50))
    assert run.usage == {"input_tokens": 1500, "output_tokens": 150}
    assert run.cost_usd == pytest.approx((1500 * 2.0 + 150 * 10.0) / 1e6, rel=1e-12)
    assert run.spent["tokens"] == 1650
    assert run.spent["cost_usd"] == run.cost_usd
    assert (run.spent["calls"], run.spent["retries"]) == (1, 2)
    assert run.spent["last_prompt"] == 1100  # this attempt's prompt, not the lost ones
    budget.after_call(priced, reply(10, 1, attempt=1))
    assert (run.spent["calls"], run.spent["retries"], run.spent["tokens"]) == (2, 2, 1661)
    budget.after_call(priced, reply(0, 0, attempt=0))  # attempt unknown: no retry counted
    assert run.spent["retries"] == 2
    assert budget.receipt() == {
        "usage": {"input_tokens": 1510, "output_tokens": 151},
        "cost_usd": round((1510 * 2.0 + 151 * 10.0) / 1e6, 6),
    }


def test_without_prices_nothing_costs() -> None:
    run = RunState()
    Budget(run).after_call(spec(max_cost_usd=0.0), reply(1000, 100))
    assert run.cost_usd == 0 and run.spent["cost_usd"] == 0


def test_a_call_that_reaches_the_token_budget_is_fine_one_past_it_stops_the_run() -> None:
    run = RunState()
    budget = Budget(run)
    budget.after_call(spec(max_tokens_budget=1100), reply(1000, 100))  # exactly at the budget
    with pytest.raises(RunError) as err:
        budget.after_call(spec(max_tokens_budget=1100), reply(1, 0))
    assert err.value.message == "token budget 1100 exceeded: 1101 used, 2 calls, 0 retries"
    assert err.value.type == "BudgetExceeded" and err.value.non_retryable


def test_the_next_call_is_estimated_from_the_last_prompt_and_what_was_added() -> None:
    run = RunState()
    budget = Budget(run)
    budget.after_call(spec(), reply(1000, 100, attempt=2))  # spent 1,100; last prompt 1,100
    added = [tool_message(400), tool_message(403)]  # 100 + 100 tokens (integer division)
    budget.before_call(spec(max_tokens_budget=1100 + 1100 + 200), added)  # fits exactly
    with pytest.raises(RunError) as err:
        budget.before_call(spec(max_tokens_budget=1100 + 1100 + 199), added)
    assert err.value.message == (
        "token budget 2399 cannot cover the next model call (about 1300 tokens): 1100 used, "
        "1 call, 1 retry"
    )
    budget.before_call(spec(), added)  # no budget: nothing to check


def test_the_estimate_counts_characters_not_escapes() -> None:
    run = RunState()
    budget = Budget(run)
    added = [{"role": "user", "content": "é" * 400}]  # 400 characters, not 2,400 escaped
    chars = len(json.dumps(added[0], ensure_ascii=False))
    budget.before_call(spec(max_tokens_budget=chars // 4), added)
    with pytest.raises(RunError):
        budget.before_call(spec(max_tokens_budget=chars // 4 - 1), added)


def test_the_next_call_is_priced_before_it_is_made() -> None:
    run = RunState()
    budget = Budget(run)
    priced = [4.0, 8.0]
    budget.after_call(spec(prices=priced), reply(100_000, 0))  # $0.40, last prompt 100k
    # The next call's prompt, about 100,000 tokens at $4/M: $0.40 more, $0.80 in all.
    budget.before_call(spec(max_cost_usd=0.8, prices=priced), [])
    with pytest.raises(RunError):  # a hair under: per million tokens, not a little more
        budget.before_call(spec(max_cost_usd=0.8 - 1e-9, prices=priced), [])
    with pytest.raises(RunError) as err:
        budget.before_call(spec(max_cost_usd=0.79, prices=priced), [])
    assert err.value.message == (
        "cost budget $0.79 cannot cover the next model call (about $0.4000): $0.4000 spent, "
        "1 call, 0 retries"
    )
    budget.before_call(spec(max_cost_usd=0.01), [])  # no prices: cost is not checked


def test_a_call_that_crosses_the_cost_budget_stops_the_run() -> None:
    run = RunState()
    budget = Budget(run)
    priced = spec(max_cost_usd=0.5, prices=[5.0, 0.0])
    budget.after_call(priced, reply(100_000, 7))  # $0.50: at the budget
    with pytest.raises(RunError) as err:
        budget.after_call(priced, reply(1, 0))
    assert err.value.message == "cost budget $0.5 exceeded: $0.5000 spent, 2 calls, 0 retries"


def test_a_child_runs_usage_and_cost_count_against_its_parent() -> None:
    run = RunState()
    budget = Budget(run)
    budget.add_child({"input_tokens": 300, "output_tokens": "20", "other": 5}, 0.25)
    budget.add_child({"input_tokens": None}, None)
    assert run.usage == {"input_tokens": 300, "output_tokens": 20}
    assert run.spent["tokens"] == 320 and run.spent["calls"] == 0
    assert run.spent["cost_usd"] == 0.25 and run.cost_usd == 0.25
    with pytest.raises(RunError) as err:
        budget.check(spec(max_tokens_budget=319))
    assert err.value.message == "token budget 319 exceeded: 320 used, 0 calls, 0 retries"
    budget.check(spec(max_tokens_budget=320, max_cost_usd=0.25))
    with pytest.raises(RunError) as err:
        budget.check(spec(max_cost_usd=0.24))
    assert err.value.message.startswith("cost budget $0.24 exceeded: $0.2500 spent")


def test_a_reply_without_usage_counts_nothing() -> None:
    run = RunState(usage={})  # a carried state from before usage had both keys
    budget = Budget(run)
    empty = ModelCallResult(message={"role": "assistant", "content": ""}, attempt=1)
    budget.after_call(spec(prices=[1.0, 1.0]), empty)
    assert run.usage == {"input_tokens": 0, "output_tokens": 0}
    assert run.spent["tokens"] == 0 and run.spent["last_prompt"] == 0 and run.cost_usd == 0
    budget.add_child({"input_tokens": 5}, None)
    assert run.usage == {"input_tokens": 5, "output_tokens": 0}
    fresh = RunState(usage={})
    Budget(fresh).add_child({"output_tokens": 2}, 0.0)
    assert fresh.usage == {"input_tokens": 0, "output_tokens": 2}


def test_the_receipt_rounds_cost_to_a_millionth() -> None:
    run = RunState()
    budget = Budget(run)
    budget.add_child({}, 0.12345678)
    assert budget.receipt()["cost_usd"] == 0.123457
