"""The Anthropic provider: the Messages API through the official SDK (`anthropic`).

Toren's neutral transcript is mapped to Anthropic's content blocks: assistant tool calls become
`tool_use` blocks, and tool results become `tool_result` blocks grouped into the user turn that
follows the assistant turn (the API requires that). The provider never retries: every failure
becomes a `ModelHTTPError` and Temporal's retry policy decides what happens next.

A tool Anthropic runs itself (`execution_mode="provider"`, e.g. web search) is sent as its
server-tool declaration. Its `server_tool_use` and `*_tool_result` blocks come back inside the
reply: the message keeps the reply's blocks verbatim (`provider_content`), which go back as the
assistant turn of the next request as the API requires, and a readable `provider_calls` list.

The SDK sends each request and raises its errors, with its retries off; toren builds the body
and reads the reply (`toren.worker.models._anthropic_call`). A request with `on_delta` streams
(`"stream": true`); `toren.worker.models._anthropic_stream` reads the events.

Prompt caching is on unless `settings["prompt_caching"]` is False: the request carries
`cache_control` breakpoints (`toren.worker.models._anthropic_cache`), and the usage counts the
tokens read from and written to the cache. Thinking blocks (`thinking` with its `signature`,
`redacted_thinking`) keep the reply verbatim too: within a tool loop the API wants them back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx2

from toren.agent._types import CUT_AT_MAX_TOKENS
from toren.worker.models._anthropic_cache import mark_breakpoints
from toren.worker.models._anthropic_call import client, sent
from toren.worker.models._base import (
    Message,
    ModelReply,
    ModelRequest,
    arguments_object,
    system_folded,
    usage,
)
from toren.worker.models._hosted import hosted_declaration
from toren.worker.models._tls import httpx2_tls

__all__ = ["AnthropicModel"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": CUT_AT_MAX_TOKENS,
}
"""Anthropic's `stop_reason` → `ModelReply.finish_reason` (others are kept as they are)."""
MAX_PAUSES = 5
"""Continuations of one reply Anthropic paused mid-turn (`pause_turn`) before it is kept as is."""
THINKING = frozenset({"thinking", "redacted_thinking"})
"""Blocks of extended thinking: not part of toren's transcript, but sent back as they came."""
_SENT = {"temperature": "temperature", "top_p": "top_p", "stop": "stop_sequences"}
"""toren's settings the Messages API takes (→ its names); `thinking_budget_tokens` becomes
`thinking`. Others (`seed`, OpenAI's `api` and `reasoning_effort`, which a `--model` switch from
another provider brings) are never sent: the API refuses unknown fields."""


class AnthropicModel:
    """A model behind the Anthropic Messages API, called through `anthropic.AsyncAnthropic`.

    Args:
        api_key: Sent as `x-api-key`; it never appears in an error or in `repr`.
        base_url: The API root without `/v1`, `https://api.anthropic.com` by default (the
            convention of `ANTHROPIC_BASE_URL` in Anthropic's SDK).
        http_client: An `httpx2.AsyncClient` for the SDK to send through (tests pass one with
            an `httpx2.MockTransport`); owned by the caller, never closed here. None: a client
            per call, closed after it, so no pool outlives the activity's event loop.
        timeout: Seconds allowed for each of connecting, writing, reading and pool waits.
    """

    vendor = "Anthropic"

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        *,
        http_client: httpx2.AsyncClient | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.api_key = api_key
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.http_client = http_client
        self.timeout = timeout
        # Errors name the server when it is not Anthropic's, so a misconfigured URL shows.
        self.label = (
            self.vendor
            if self.base_url == DEFAULT_BASE_URL
            else f"{self.vendor}-compatible server {self.base_url}"
        )

    def __repr__(self) -> str:
        # Where it points, and never the key.
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one request; a turn Anthropic paused (`pause_turn`) is continued in this call.

        A long turn of server tools can stop with `pause_turn`, to be sent back as it is so the
        model goes on. That is one model turn, not a retry: its parts become one reply, so the
        workflow sees a whole turn (and never ends a run on half of one).

        Raises:
            ModelHTTPError: The server answered with an error status, could not be reached, or
                sent a reply toren cannot read; `retryable` says whether to try again
                (`PromptTooLongError` for a refusal for length).
            ValueError: The transcript holds a message of an unknown role.
        """
        reply = await self._once(request)
        for _ in range(MAX_PAUSES):
            if reply.finish_reason != "pause_turn":
                break
            paused = [*request.messages, reply.message()]
            on_delta = _shifted(request.on_delta, len(reply.tool_calls))
            more = await self._once(
                dataclasses.replace(request, messages=paused, on_delta=on_delta)
            )
            reply = _joined(reply, more)
        return reply

    async def _once(self, request: ModelRequest) -> ModelReply:
        body = self.request_body(request)
        # A client per call, as the SDK's own default would be, on the worker's TLS context.
        own = self.http_client is None
        http = self.http_client or httpx2.AsyncClient(
            verify=httpx2_tls(), timeout=self.timeout, follow_redirects=True
        )
        sdk = client(self.api_key, self.base_url, http, self.timeout)
        try:
            return await sent(
                sdk,
                body,
                lambda data: self.parse_reply(data, request.model),
                request.on_delta,
                label=self.label,
                key=self.api_key,
            )
        finally:
            if own:
                await http.aclose()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API JSON body for `request`.

        Raises:
            ValueError: A message has a role other than user, assistant, tool or system (a
                system message joins the system prompt).
        """
        system, messages = system_folded(request)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": _messages(messages),
        }
        if system:
            body["system"] = system
        for name, value in request.settings.items():
            if name in _SENT and value is not None:
                body[_SENT[name]] = value
        budget = request.settings.get("thinking_budget_tokens")
        if budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if request.tools:
            body["tools"] = [_tool(tool) for tool in request.tools]
        if request.settings.get("prompt_caching") is False:
            return body
        return mark_breakpoints(body)

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
        hosted: dict[str, dict[str, Any]] = {}
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
            elif kind == "server_tool_use":
                hosted[block["id"]] = {
                    "id": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block.get("input") or {}),
                    "provider": "anthropic",
                }
            elif str(kind).endswith("_tool_result") and block.get("tool_use_id") in hosted:
                result, failed = _hosted_result(block.get("content"))
                hosted[block["tool_use_id"]].update(result=result, is_error=failed)
            # Other blocks (thinking) are not part of toren's transcript; `_verbatim` keeps them.
        stop_reason = str(data.get("stop_reason") or "")
        return ModelReply(
            content="".join(texts),
            tool_calls=calls,
            usage=_usage(data.get("usage") or {}),
            model=str(data.get("model") or model),
            finish_reason=FINISH_REASONS.get(stop_reason, stop_reason),
            provider_calls=list(hosted.values()),
            provider_content=_verbatim(blocks, bool(hosted)),
        )


def _usage(reported: dict[str, Any]) -> dict[str, int]:
    """Anthropic's usage in toren's terms: the whole prompt in `input_tokens`.

    Anthropic's own `input_tokens` are only the prompt's uncached part: the parts read from and
    written to the cache are added to it.
    """
    read = int(reported.get("cache_read_input_tokens") or 0)
    written = int(reported.get("cache_creation_input_tokens") or 0)
    return usage(
        int(reported.get("input_tokens") or 0) + read + written,
        int(reported.get("output_tokens") or 0),
        cache_read=read,
        cache_write=written,
    )


def _verbatim(blocks: list[dict[str, Any]], hosted: bool) -> dict[str, Any] | None:
    """The reply's blocks to keep as they came, or None when toren's transcript says it all.

    The API wants a server tool's blocks back as they came (citations, encrypted content), and
    thinking blocks unchanged (their signature checks them) within a tool loop; only then is
    the reply kept whole.
    """
    if hosted or any(block.get("type") in THINKING for block in blocks):
        return {"anthropic": blocks}
    return None


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks: list[dict[str, Any]] = []
        verbatim = (message.get("provider_content") or {}).get("anthropic")
        if role == "assistant" and isinstance(verbatim, list):
            blocks.extend(verbatim)
        elif role == "assistant":
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


def _joined(first: ModelReply, then: ModelReply) -> ModelReply:
    """A paused reply and its continuation as one reply (the blocks of both, in order)."""
    blocks = [*_blocks_of(first), *_blocks_of(then)]
    hosted = first.provider_calls + then.provider_calls
    keys = dict.fromkeys([*first.usage, *then.usage])
    return ModelReply(
        content=first.content + then.content,
        tool_calls=first.tool_calls + then.tool_calls,
        usage={k: first.usage.get(k, 0) + then.usage.get(k, 0) for k in keys},
        model=then.model,
        finish_reason=then.finish_reason,
        provider_calls=hosted,
        provider_content=_verbatim(blocks, bool(hosted)),
    )


def _shifted(
    on_delta: Callable[[dict[str, Any]], None] | None, calls: int
) -> Callable[[dict[str, Any]], None] | None:
    """`on_delta` for a continuation: its tool calls follow the `calls` already made."""
    if on_delta is None or not calls:
        return on_delta
    sink = on_delta

    def shifted(delta: dict[str, Any]) -> None:
        if delta.get("type") == "tool_call_delta":
            delta = {**delta, "index": delta["index"] + calls}
        sink(delta)

    return shifted


def _blocks_of(reply: ModelReply) -> list[dict[str, Any]]:
    kept = (reply.provider_content or {}).get("anthropic")
    if isinstance(kept, list):
        return kept
    blocks: list[dict[str, Any]] = []
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": call["name"],
             "input": arguments_object(call.get("arguments")) or {}}
        )  # fmt: skip
    return blocks


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("provider"):
        return hosted_declaration(
            str(tool["provider"]), str(tool["name"]), dict(tool.get("provider_options") or {})
        )
    return {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
    }


def _hosted_result(content: Any) -> tuple[str, bool]:
    """A server tool's result, readable: `title — url` per web page, or the error code."""
    if isinstance(content, dict):
        code = content.get("error_code") or content.get("type") or "error"
        return f"error: {code}", True
    if isinstance(content, list):
        lines = [
            f"{item.get('title') or ''} — {item.get('url') or ''}".strip(" —")
            for item in content
            if isinstance(item, dict)
        ]
        return "\n".join(lines), False
    return str(content or ""), False


def _text(value: Any) -> str:
    # Tool results are strings in toren's format; stringify anything else rather than fail.
    return value if isinstance(value, str) else json.dumps(value)
