"""What a model's tokens cost: agent.yaml `limits.prices`, else the `genai-prices` table.

```python
prices_for("anthropic/claude-sonnet-4-20250514", None)
# -> (3.0, 15.0, 0.3, 3.75): USD per million input, output, cache-read and cache-write tokens
prices_for("openai/gpt-4o", {"input": 2.5, "output": 10.0})   # -> (2.5, 10.0)
```

The price is resolved once, on the worker, and recorded in the run's spec, so the workflow
computes costs deterministically (`toren.workflows._budget.cost_usd`) and a replay never depends
on the table's version. Cache reads and writes have prices of their own (Anthropic bills a read
at a tenth of the input price); prices without them price cached tokens as input.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PROVIDERS", "prices_for"]

PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "vertex": "google",
    "bedrock": "aws",
}
"""toren's model prefixes → the price table's provider ids (others have no known price)."""


def prices_for(model: str, configured: Mapping[str, float] | None) -> tuple[float, ...] | None:
    """USD per million input, output, cache-read and cache-write tokens of `model`, or `None`.

    `configured` (agent.yaml `limits.prices`: `inputPerMTok`, `outputPerMTok`) wins, and has
    input and output prices only; a scripted or local model has no price unless configured.
    """
    if configured:
        return float(configured["input"]), float(configured["output"])
    prefix, _, name = model.partition("/")
    provider = PROVIDERS.get(prefix)
    if provider is None or not name:
        return None
    try:
        from genai_prices import Usage, calc_price

        def per_million(**tokens: int) -> tuple[float, float]:
            # A thousand tokens: long prompts cost more per token with some providers.
            price = calc_price(Usage(**tokens), model_ref=name, provider_id=provider)
            return float(price.input_price) * 1000, float(price.output_price) * 1000

        tokens_in, tokens_out = per_million(input_tokens=1000, output_tokens=1000)
        # The table counts cached tokens inside `input_tokens`, as toren's usage does.
        read = per_million(input_tokens=1000, cache_read_tokens=1000)[0]
        write = per_million(input_tokens=1000, cache_write_tokens=1000)[0]
    except Exception:  # LookupError for an unknown model; the table raises a few kinds
        return None
    return tokens_in, tokens_out, read, write
