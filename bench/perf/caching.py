"""What prompt caching saves on a 30-turn tool loop, priced as Anthropic prices it (issue 39).

Runs the loop through `AnthropicModel` against a fake Messages API that caches as Anthropic does:
a request's prefix up to each `cache_control` breakpoint is written to the cache, and a later
request whose prefix up to a breakpoint was written before reads it (the longest such prefix,
looked up at each breakpoint); the rest of the prompt is uncached input. Tokens are characters
/ 4. Each turn adds a tool call and a ~5 KB result. The same loop runs with caching off; both are
priced with genai-prices' Claude Sonnet 4 prices (`toren.workflows._budget.cost_usd`).

    .venv/bin/python -m bench.perf.caching   # both input costs and their ratio (goal <= 0.35)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2

from toren.worker._prices import prices_for
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelRequest
from toren.workflows._budget import cost_usd

TURNS = 30
MODEL = "claude-sonnet-4-20250514"
SYSTEM = "You are a support agent. Look orders up before answering. " * 40
TOOL = {"name": "lookup", "description": "Look an order up.", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}  # fmt: skip


def tokens(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"))) // 4


class FakeAnthropic:
    """Answers each request with a tool call (the last with text), caching as Anthropic does."""

    def __init__(self) -> None:
        self.cached: set[str] = set()
        self.turn = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        # The prompt as one sequence of blocks in cache order: tools, system, messages.
        blocks: list[Any] = [*body.get("tools", [])]
        system = body.get("system")
        blocks += system if isinstance(system, list) else ([system] if system else [])
        for turn in body["messages"]:
            content = turn["content"]
            blocks += content if isinstance(content, list) else [content]
        plain = [_unmarked(b) for b in blocks]
        total = tokens(plain)
        marks = [i for i, b in enumerate(blocks) if isinstance(b, dict) and "cache_control" in b]
        read = 0
        for i in marks:
            # The longest earlier-written prefix ending at or before this breakpoint (lookback).
            for j in range(i, max(-1, i - 20), -1):
                if json.dumps(plain[: j + 1]) in self.cached:
                    read = max(read, tokens(plain[: j + 1]))
                    break
        written = 0
        for i in marks:
            key = json.dumps(plain[: i + 1])
            if key not in self.cached:
                self.cached.add(key)
                written = max(written, tokens(plain[: i + 1]) - read)
        self.turn += 1
        last = self.turn > TURNS
        content = (
            [{"type": "text", "text": "All orders checked."}]
            if last
            else [
                {
                    "type": "tool_use",
                    "id": f"t{self.turn}",
                    "name": "lookup",
                    "input": {"order_id": f"A-{self.turn}"},
                }
            ]  # fmt: skip
        )
        usage = {"input_tokens": total - read - written, "output_tokens": 40,
                 "cache_read_input_tokens": read,
                 "cache_creation_input_tokens": written}  # fmt: skip
        stop = "end_turn" if last else "tool_use"
        return httpx2.Response(200, json={
            "id": f"msg_{self.turn}", "type": "message", "role": "assistant", "model": MODEL,
            "content": content, "stop_reason": stop, "usage": usage})  # fmt: skip


def _unmarked(block: Any) -> Any:
    return (
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, dict)
        else block
    )


async def loop(caching: bool) -> tuple[float, dict[str, int]]:
    """The input cost of one 30-turn loop, and its summed usage."""
    model = AnthropicModel(
        "sk-bench", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(FakeAnthropic()))
    )
    prices = prices_for(f"anthropic/{MODEL}", None)
    assert prices is not None
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Check my 30 orders."}]
    summed: dict[str, int] = {}
    cost = 0.0
    for _ in range(TURNS + 1):
        reply = await model.complete(ModelRequest(
            model=MODEL, system=SYSTEM, messages=messages, tools=[TOOL],
            settings={} if caching else {"prompt_caching": False}))  # fmt: skip
        input_only = {**reply.usage, "output_tokens": 0}
        cost += cost_usd(input_only, list(prices))
        for key, value in reply.usage.items():
            summed[key] = summed.get(key, 0) + value
        messages.append(reply.message())
        for call in reply.tool_calls:
            result = f"order {call['id']}: " + "shipped, in transit. " * 240
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": "lookup",
                             "content": result})  # fmt: skip
    return cost, summed


async def main() -> None:
    cached, with_usage = await loop(True)
    uncached, without_usage = await loop(False)
    print(f"{TURNS}-turn tool loop, {MODEL}, input cost as Anthropic prices it (genai-prices):")
    print(f"  without caching: ${uncached:.4f}  usage {without_usage}")
    print(f"  with caching:    ${cached:.4f}  usage {with_usage}")
    print(f"  ratio: {cached / uncached:.3f} (goal: at most 0.35)")


if __name__ == "__main__":
    asyncio.run(main())
