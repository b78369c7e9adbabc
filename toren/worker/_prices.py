"""What a model's tokens cost: agent.yaml `limits.prices`, else the `genai-prices` table.

```python
prices_for("openai/gpt-4o", None)   # -> (2.5, 10.0) USD per million input / output tokens
cost_usd({"input_tokens": 1000, "output_tokens": 500}, (2.5, 10.0))   # -> 0.0075
```

The price is resolved once, on the worker, and recorded in the run's spec, so the workflow
computes costs deterministically and a replay never depends on the table's version.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PROVIDERS", "cost_usd", "prices_for"]

PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
"""toren's model prefixes → the price table's provider ids (others have no known price)."""


def prices_for(model: str, configured: Mapping[str, float] | None) -> tuple[float, float] | None:
    """USD per million input and output tokens of `model`, or `None` when unknown.

    `configured` (agent.yaml `limits.prices`: `inputPerMTok`, `outputPerMTok`) wins; a scripted
    or local model has no price unless configured.
    """
    if configured:
        return float(configured["input"]), float(configured["output"])
    prefix, _, name = model.partition("/")
    provider = PROVIDERS.get(prefix)
    if provider is None or not name:
        return None
    try:
        from genai_prices import Usage, calc_price

        # A thousand tokens: long prompts cost more per token with some providers.
        thousand = calc_price(
            Usage(input_tokens=1000, output_tokens=1000), model_ref=name, provider_id=provider
        )
    except Exception:  # LookupError for an unknown model; the table raises a few kinds
        return None
    return float(thousand.input_price) * 1000, float(thousand.output_price) * 1000


def cost_usd(usage: Mapping[str, int], prices: tuple[float, float] | None) -> float | None:
    """The cost of `usage` at `prices` (per million tokens), or `None` without prices."""
    if prices is None:
        return None
    tokens_in = int(usage.get("input_tokens", 0))
    tokens_out = int(usage.get("output_tokens", 0))
    return (tokens_in * prices[0] + tokens_out * prices[1]) / 1_000_000
