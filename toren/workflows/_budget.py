"""Token and cost budgets inside a run: every paid model attempt and every child run counts.

`limits.maxTokens` and `limits.maxCostUSD` bound a run (in a thread, each message's execution).
Counted: each model call's tokens, the tokens of earlier attempts of it that were billed and
then lost (a worker that died after the provider answered), and the usage of child runs, failed
ones included. A run stops before a model call the remaining budget cannot cover (its prompt
estimated from the last call's size and what was added since) or right after one that crossed
the budget. Costs use the prices recorded in the run's spec, so a replay computes the same.
Workflow-side code: deterministic, no I/O.

A token is a token whether the provider read it from its prompt cache or not: `input_tokens` is
the whole prompt (the model reads all of it; the next prompt is at least as large), and
`maxTokens` bounds the tokens read and written. The cache shows in the cost: the tokens of
`cache_read_tokens` and `cache_write_tokens` (there only when non-zero) are priced at the
cache's own prices, when the spec recorded them.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec
    from toren.agent._types import ModelCallResult, RunState
    from toren.errors import RunError

__all__ = ["CACHE_KEYS", "Budget", "cost_usd", "fresh_spending"]

CHARS_PER_TOKEN = 4
"""How a prompt's growth since the last call is turned into tokens for the estimate."""


CACHE_KEYS = ("cache_read_tokens", "cache_write_tokens")
"""Usage keys of the prompt tokens a provider read from or wrote to its cache (part of
`input_tokens`); a usage has them only when non-zero."""


def cost_usd(usage: dict[str, int], prices: list[float]) -> float:
    """The cost of `usage` at `prices`.

    `prices`: USD per million input, output, and optionally cache-read and cache-write tokens;
    a missing cache price is the input price.
    """
    tokens_in = int(usage.get("input_tokens", 0))
    tokens_out = int(usage.get("output_tokens", 0))
    read, write = (int(usage.get(key, 0)) for key in CACHE_KEYS)
    if not read and not write:
        # The sum every usage without cache tokens has always had: replays cost the same.
        return (tokens_in * prices[0] + tokens_out * prices[1]) / 1_000_000
    price_in, price_out, *cached = prices
    read_price, write_price = [*cached, price_in, price_in][:2]
    uncached = tokens_in - read - write
    return (
        uncached * price_in + read * read_price + write * write_price + tokens_out * price_out
    ) / 1_000_000


def fresh_spending() -> dict[str, float]:
    """What an execution has spent before its first call."""
    return {"tokens": 0, "cost_usd": 0.0, "calls": 0, "retries": 0, "last_prompt": 0}


class Budget:
    """Counts what a run spends and stops it at `maxTokens` or `maxCostUSD`."""

    def __init__(self, run: RunState) -> None:
        self._run = run
        if not run.spent:
            run.spent = fresh_spending()

    def _cost(self, spec: AgentSpec, usage: dict[str, int]) -> float:
        return cost_usd(usage, spec.prices) if spec.prices else 0.0

    def before_call(self, spec: AgentSpec, added: list[dict[str, Any]]) -> None:
        """Stop before a call the rest of the budget cannot cover.

        `added`: the messages appended since the last model call (tool results, the user's).
        """
        spent = self._run.spent
        grown = sum(len(json.dumps(m, ensure_ascii=False)) for m in added) // CHARS_PER_TOKEN
        estimate = int(spent["last_prompt"]) + grown
        tokens, cost_limit, whose = self.limits(spec)
        if tokens is not None and spent["tokens"] + estimate > tokens:
            raise self._exceeded(
                f"token budget {tokens:g}{whose} cannot cover the next model call "
                f"(about {estimate} tokens): {int(spent['tokens'])} used",
            )
        if cost_limit is not None and spec.prices:
            cost = spent["cost_usd"] + estimate * spec.prices[0] / 1_000_000
            if cost > cost_limit:
                raise self._exceeded(
                    f"cost budget ${cost_limit:g}{whose} cannot cover the next model call "
                    f"(about ${cost - spent['cost_usd']:.4f}): ${spent['cost_usd']:.4f} spent",
                )

    def after_call(self, spec: AgentSpec, reply: ModelCallResult) -> None:
        """Count a call (and its billed earlier attempts); stop if it crossed the budget."""
        run, spent = self._run, self._run.spent
        usage = {
            k: int(reply.usage.get(k, 0)) + int(reply.earlier_usage.get(k, 0))
            for k in ("input_tokens", "output_tokens", *CACHE_KEYS)
        }
        for key, value in usage.items():
            if not value and key in CACHE_KEYS:
                continue  # a run that never cached keeps the two keys it always had
            run.usage[key] = run.usage.get(key, 0) + value
        cost = self._cost(spec, usage)
        run.cost_usd += cost
        spent["tokens"] += usage["input_tokens"] + usage["output_tokens"]
        spent["cost_usd"] += cost
        spent["calls"] += 1
        spent["retries"] += max(0, reply.attempt - 1)
        spent["last_prompt"] = int(reply.usage.get("input_tokens", 0)) + int(
            reply.usage.get("output_tokens", 0)
        )
        self.check(spec)

    def add_child(self, usage: dict[str, Any], cost: float | None) -> None:
        """Count a finished child run's usage (it reaches this run even when the child failed)."""
        run, spent = self._run, self._run.spent
        for key in ("input_tokens", "output_tokens", *CACHE_KEYS):
            value = int(usage.get(key, 0) or 0)
            if value or key not in CACHE_KEYS:
                run.usage[key] = run.usage.get(key, 0) + value
        spent["tokens"] += int(usage.get("input_tokens", 0) or 0) + int(
            usage.get("output_tokens", 0) or 0
        )
        spent["cost_usd"] += cost or 0.0
        run.cost_usd += cost or 0.0

    def check(self, spec: AgentSpec) -> None:
        """Stop the run if it has gone past a budget."""
        spent = self._run.spent
        tokens, cost_limit, whose = self.limits(spec)
        if tokens is not None and spent["tokens"] > tokens:
            raise self._exceeded(
                f"token budget {tokens:g}{whose} exceeded: {int(spent['tokens'])} used"
            )
        if cost_limit is not None and spent["cost_usd"] > cost_limit:
            raise self._exceeded(
                f"cost budget ${cost_limit:g}{whose} exceeded: ${spent['cost_usd']:.4f} spent"
            )

    def limits(self, spec: AgentSpec) -> tuple[float | None, float | None, str]:
        """The token and cost budgets in force, and whose they are when not the agent's own.

        A run an agent tool started may spend no more than its parent had left then
        (`RunState.tree`, `toren.workflows._agent_tools`), nor more than its own limits allow.
        """
        tokens: float | None = spec.max_tokens_budget
        cost = spec.max_cost_usd
        tree = self._run.tree or {}
        capped = False
        for key, own in (("tokens", tokens), ("cost_usd", cost)):
            cap = tree.get(key)
            if isinstance(cap, int | float) and (own is None or cap < own):
                capped = True
                if key == "tokens":
                    tokens = cap
                else:
                    cost = cap
        return tokens, cost, " (what its parent run had left)" if capped else ""

    def _exceeded(self, what: str) -> RunError:
        spent = self._run.spent
        calls, retries = int(spent["calls"]), int(spent["retries"])
        return RunError(
            f"{what}, {calls} call{'s' if calls != 1 else ''}, {retries} "
            f"retr{'ies' if retries != 1 else 'y'}",
            "BudgetExceeded",
        )

    def receipt(self) -> dict[str, Any]:
        """What the run spent, for its result and failure."""
        return {"usage": dict(self._run.usage), "cost_usd": round(self._run.cost_usd, 6)}
