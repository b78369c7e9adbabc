"""A streamed Anthropic message, read event by event into the message the API would have sent.

The Messages API streams `message_start`, then per content block `content_block_start`, its
`content_block_delta`s and `content_block_stop`, then `message_delta` (stop reason, output
usage) and `message_stop`, with `ping`s anywhere. Anthropic may add event types and asks clients
to ignore the ones they do not know, so toren does; an `error` event fails the call. What toren
cannot ignore safely is a delta of an unknown type on a block it reads (text, a tool call, a
server tool call): the reply would silently lack part of the answer, so the call fails,
retryably. Thinking blocks are rebuilt with their signature (the API wants them back unchanged);
unknown deltas of other blocks are dropped.

The blocks are rebuilt whole (text with its citations, tool calls with their input), so a reply
with server tools keeps its blocks verbatim exactly as the non-streaming path does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from toren.errors import TorenError
from toren.worker.models._base import ModelReply

__all__ = ["AnthropicStream", "StreamError"]

SNIPPET_CHARS = 120
"""How much of an event's data an error quotes."""

READ_BLOCKS = frozenset({"text", "tool_use", "server_tool_use"})
"""Blocks whose content reaches toren's reply; an unknown delta on one fails the call."""
EVENTS = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
     "message_delta", "message_stop"}
)  # fmt: skip
"""The events toren reads; others (`ping`, any new one) are ignored, `error` fails the call."""


class StreamError(TorenError):
    """A stream toren cannot read; the message says what was wrong (never reaches a user).

    `AnthropicModel` prefixes it with the provider's name and raises a retryable
    `ModelHTTPError`.
    """


class AnthropicStream:
    """Reads a streamed message into the body the non-streaming API would have sent."""

    def __init__(self) -> None:
        self.done = False
        """Whether `message_stop` has come."""
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._raw: dict[int, str] = {}
        self._calls: dict[int, int] = {}
        """Block index → the call's place in `ModelReply.tool_calls` (the deltas' `index`)."""

    def feed(self, event: str | None, text: str) -> list[dict[str, Any]]:
        """Take the next event (its name and data); return its deltas (see `ModelRequest.on_delta`).

        Raises:
            StreamError: An `error` event, data that is not JSON, or an unknown delta on a
                block toren reads.
            ValueError: An event of the wrong shape (also KeyError, TypeError and friends).
        """
        if event == "error":
            raise StreamError(f"sent an error event mid-stream: {_error_text(text)}")
        if event not in EVENTS:
            return []
        data = _json(event, text)
        if not isinstance(data, dict):
            raise ValueError("the data is not a JSON object")
        if event == "message_start":
            self._message = {**data["message"], "content": []}
            return []
        if self._message is None:
            raise ValueError("no message_start before it")
        if event == "content_block_start":
            return self._start(int(data["index"]), dict(data["content_block"]))
        if event == "content_block_delta":
            return self._delta(int(data["index"]), data["delta"])
        if event == "content_block_stop":
            self._close(int(data["index"]))
        elif event == "message_delta":
            self._message.update(data.get("delta") or {})
            # Cumulative counts; `input_tokens` comes in `message_start` (and here, lately).
            usage = {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            self._message["usage"] = {**(self._message.get("usage") or {}), **usage}
        else:  # message_stop
            self.done = True
        return []

    def _start(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        self._blocks[index] = block
        kind = block["type"]
        if kind in ("tool_use", "server_tool_use"):
            self._json[index] = []
        if kind == "tool_use":
            self._calls[index] = len(self._calls)
            return [{"type": "tool_call_delta", "index": self._calls[index], "id": block["id"],
                     "name": block["name"], "arguments": ""}]  # fmt: skip
        if kind == "text" and block.get("text"):
            return [{"type": "text_delta", "text": str(block["text"])}]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[dict[str, Any]]:
        block = self._blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            text = str(delta["text"])
            block["text"] = str(block.get("text") or "") + text
            return [{"type": "text_delta", "text": text}] if text else []
        if kind == "input_json_delta":
            fragment = str(delta["partial_json"])
            self._json[index].append(fragment)
            if index not in self._calls or not fragment:
                return []
            return [{"type": "tool_call_delta", "index": self._calls[index], "id": None,
                     "name": None, "arguments": fragment}]  # fmt: skip
        if kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta["thinking"])
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif block["type"] in READ_BLOCKS:
            raise StreamError(
                f"sent a {kind!r} delta for a {block['type']!r} block, which toren cannot read"
            )
        return []

    def _close(self, index: int) -> None:
        parts = self._json.pop(index, None)
        if parts is None:
            return
        raw = "".join(parts)
        if not raw.strip():
            return  # no input streamed: the start's own (`{}`) stands
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            self._blocks[index]["input"] = parsed
        else:
            # Cut at max_tokens mid-input: the call keeps the model's text, so the workflow
            # tells the model its arguments are invalid; the block sent back holds `{}`.
            self._blocks[index]["input"] = {}
            self._raw[index] = raw

    def reply(self, parse: Callable[[Any], ModelReply]) -> ModelReply:
        """The whole reply: the events as one message, through `parse`."""
        if self._message is None:
            raise ValueError("no message_start")
        for index in list(self._json):
            self._close(index)
        content = [self._blocks[i] for i in sorted(self._blocks)]
        reply = parse({**self._message, "content": content})
        for index, raw in self._raw.items():
            if index in self._calls:
                reply.tool_calls[self._calls[index]]["arguments"] = raw
        return reply


def _json(event: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        snippet = text[:SNIPPET_CHARS]
        raise StreamError(f"sent a {event!r} event whose data is not JSON: {snippet!r}") from None


def _error_text(text: str) -> str:
    try:
        error = json.loads(text).get("error") or {}
        return f"{error['type']}: {error['message']}"
    except (ValueError, AttributeError, KeyError, TypeError):
        return repr(text[:SNIPPET_CHARS])
