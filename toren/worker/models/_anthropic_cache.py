"""Anthropic prompt caching: where a request's `cache_control` breakpoints go.

Anthropic caches a prompt's prefix up to a block marked `cache_control: {"type": "ephemeral"}`
and bills a later read of it at a tenth of the input price. The prefix is tools, then system,
then messages, and it must be byte for byte the same: the body is built from the transcript
alone (no clock, no ids of its own; keys in a fixed order), so the same transcript gives the
same bytes. The API takes at most four breakpoints; toren places, in this order of worth:

1. the newest message's last block: the whole prompt is written, so the next call of the loop
   (this prompt and a few blocks more) reads it;
2. the instructions (or, without any, the last tool): tools and instructions, the prefix every
   run of the agent shares;
3. the message before the previous reply: read when the newest turn added more blocks than
   the API looks back over (about 20) to find the last call's breakpoint.

The fourth is left to a request's own blocks (a user's content blocks may carry one); when they
carry more, toren places fewer, never more than four in all. Nothing is marked in place: a
marked block is a copy, so the transcript the request came from never holds one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_BREAKPOINTS", "mark_breakpoints"]

MAX_BREAKPOINTS = 4
"""The API refuses a request with more blocks marked `cache_control`."""
EPHEMERAL = {"type": "ephemeral"}
MARKABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
"""Blocks that may carry a breakpoint (thinking blocks may not, empty text blocks may not)."""


def mark_breakpoints(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a Messages API request) with its cache breakpoints placed; see the module."""
    messages: list[dict[str, Any]] = list(body.get("messages") or [])
    tools: list[dict[str, Any]] = list(body.get("tools") or [])
    places = MAX_BREAKPOINTS - sum(_marked(turn.get("content")) for turn in messages)
    marked = {**body}
    for place in ("newest", "system" if body.get("system") else "tools", "previous"):
        if places <= 0:
            break
        if place == "newest" and messages:
            places -= _mark_turn(messages, len(messages) - 1)
        elif place == "previous" and len(messages) >= 3:
            places -= _mark_turn(messages, len(messages) - 3)
        elif place == "system":
            marked["system"] = [
                {"type": "text", "text": body["system"], "cache_control": EPHEMERAL}
            ]
            places -= 1
        elif place == "tools" and tools:
            tools[-1] = {**tools[-1], "cache_control": EPHEMERAL}
            places -= 1
    if messages:
        marked["messages"] = messages
    if tools:
        marked["tools"] = tools
    return marked


def _mark_turn(messages: list[dict[str, Any]], index: int) -> int:
    """Mark the last markable block of turn `index` (a copy); 1 if one was marked, else 0."""
    turn = messages[index]
    content = turn.get("content")
    if isinstance(content, str):
        if not content:
            return 0
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
    else:
        blocks = list(content or [])
    for position in range(len(blocks) - 1, -1, -1):
        block = blocks[position]
        if block.get("type") in MARKABLE and not (
            block.get("type") == "text" and not block.get("text")
        ):
            if "cache_control" in block:
                return 0  # already a breakpoint, counted as one
            blocks[position] = {**block, "cache_control": EPHEMERAL}
            messages[index] = {**turn, "content": blocks}
            return 1
    return 0


def _marked(content: Any) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for block in content if isinstance(block, dict) and "cache_control" in block)
