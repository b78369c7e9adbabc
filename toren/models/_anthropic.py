"""The Anthropic provider: the Messages API over httpx.

Toren's neutral transcript is mapped to Anthropic's content blocks: assistant tool calls become
`tool_use` blocks, and tool results become `tool_result` blocks grouped into the user turn that
follows the assistant turn (the API requires that). The provider never retries: every failure
becomes a `ModelHTTPError` and Temporal's retry policy decides what happens next.
"""

from __future__ import annotations

import json
from typing import Any

from toren._types import CUT_AT_MAX_TOKENS
from toren.models._base import Message, ModelReply, ModelRequest, arguments_object
from toren.models._http_model import HTTPModel

__all__ = ["AnthropicModel"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": CUT_AT_MAX_TOKENS,
}
"""Anthropic's `stop_reason` → `ModelReply.finish_reason` (others are kept as they are)."""


class AnthropicModel(HTTPModel):
    """A model behind the Anthropic Messages API.

    `api_key` is sent as `x-api-key`. `base_url` is the API root without `/v1`,
    `https://api.anthropic.com` by default (the same convention as `ANTHROPIC_BASE_URL` in
    Anthropic's SDK). The other arguments are `HTTPModel`'s.
    """

    vendor = "Anthropic"
    default_base_url = DEFAULT_BASE_URL
    path = "/v1/messages"
    reply_kind = "message"

    def headers(self) -> dict[str, str]:
        """`Accept`, the key and the API version."""
        return {
            "Accept": "application/json",
            "x-api-key": self.api_key,
            "anthropic-version": API_VERSION,
        }

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API JSON body for `request`.

        Raises:
            ValueError: A message has a role other than user, assistant or tool.
        """
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": _messages(request.messages),
        }
        if request.system:
            body["system"] = request.system
        for name, value in request.settings.items():
            # Only `stop` is named otherwise; a `seed` reaches the API, which refuses it by name
            # (agent.yaml refuses it for anthropic/ models; `--model` can still bring one).
            body["stop_sequences" if name == "stop" else name] = value
        if request.tools:
            body["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
                }
                for tool in request.tools
            ]
        return body

    def parse_reply(self, data: Any, model: str) -> ModelReply:
        """Turn a Messages API response body into a `ModelReply`.

        Raises:
            ValueError: The body has no `content` list (also KeyError, TypeError and friends for
                other shapes that are not a message).
        """
        if not isinstance(data, dict):
            raise ValueError("the body is not a JSON object")
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise ValueError(f"no content list; got keys {sorted(data)}")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append(
                    {
                        "id": block["id"],
                        "name": block["name"],
                        "arguments": json.dumps(block.get("input") or {}),
                    }
                )
            # Other blocks (thinking, server tools) are not part of toren's transcript.
        usage = data.get("usage") or {}
        stop_reason = str(data.get("stop_reason") or "")
        return ModelReply(
            content="".join(texts),
            tool_calls=calls,
            usage={
                "input_tokens": int(usage.get("input_tokens") or 0),
                "output_tokens": int(usage.get("output_tokens") or 0),
            },
            model=str(data.get("model") or model),
            finish_reason=FINISH_REASONS.get(stop_reason, stop_reason),
        )


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks: list[dict[str, Any]] = []
        if role == "assistant":
            text = message.get("content") or ""
            if text:
                blocks.append({"type": "text", "text": str(text)})
            for call in message.get("tool_calls") or []:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": arguments_object(call.get("arguments")) or {},
                    }
                )
        elif role == "tool":
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message["tool_call_id"],
                    "content": _text(message.get("content", "")),
                    "is_error": bool(message.get("is_error", False)),
                }
            )
        elif role == "user":
            content = message.get("content", "")
            if isinstance(content, list):
                blocks.extend(content)  # already content blocks (e.g. images)
            elif content != "":
                blocks.append({"type": "text", "text": str(content)})
        else:
            raise ValueError(f"message role {role!r} is not one of user, assistant, tool")
        # Empty content blocks are rejected by the API; an empty turn carries nothing anyway.
        if not blocks:
            continue
        wire_role = "assistant" if role == "assistant" else "user"
        # Tool results (and any user text after them) share one user turn, and turns of the
        # same role are merged, so the roles alternate as the API requires.
        if out and out[-1]["role"] == wire_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": wire_role, "content": blocks})
    for turn in out:
        # A lone text block is sent as a plain string, the form most requests use.
        content = turn["content"]
        if (
            len(content) == 1
            and content[0].get("type") == "text"
            and set(content[0])
            == {
                "type",
                "text",
            }
        ):
            turn["content"] = content[0]["text"]
    return out


def _text(value: Any) -> str:
    # Tool results are strings in toren's format; stringify anything else rather than fail.
    return value if isinstance(value, str) else json.dumps(value)
