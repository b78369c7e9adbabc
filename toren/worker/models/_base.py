"""What a model provider is: a request in toren's message format, a reply, and its errors.

Transcript messages are provider-neutral dicts:

```
{"role": "user", "content": "..."}
{"role": "assistant", "content": "...", "tool_calls": [{"id", "name", "arguments"}]}
{"role": "tool", "tool_call_id": "...", "name": "...", "content": "...", "is_error": false}
{"role": "system", "content": "..."}
```

A `system` message (run input `messages` may hold one) goes to OpenAI's APIs as it is; the
providers without such a role (Anthropic, Gemini, Bedrock) fold it into the system prompt
(`system_folded`).

An assistant message may also hold `provider_calls` (`[{"id", "name", "arguments", "provider",
"result", "is_error"}]`: calls of tools the provider ran itself, readable by anyone) and
`provider_content` (`{"anthropic": [blocks]}`: the reply verbatim, which that provider needs back
in the next request: its server tools' blocks, its thinking with their signatures); the workflow
runs neither.

`arguments` is the JSON text the model produced (it may be invalid: the workflow checks it and
tells the model; a provider sends `{}` back in its place, see `arguments_object`). Providers never
retry: they raise `ModelHTTPError` and Temporal's retry policy decides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from toren.errors import ModelHTTPError

__all__ = [
    "ModelHTTPError",
    "ModelProvider",
    "ModelReply",
    "ModelRequest",
    "arguments_object",
    "replayed",
    "system_folded",
    "usage",
]

Message = dict[str, Any]


@dataclass
class ModelRequest:
    """One model call."""

    model: str
    """The provider's model name (without the `openai/` prefix)."""
    system: str
    """The agent's instructions."""
    messages: list[Message]
    """The transcript so far."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """`{"name", "description", "parameters"}` per tool; `parameters` is a JSON Schema. A tool
    the provider runs also has `"provider"` (who runs it) and `"provider_options"`."""
    max_tokens: int = 4096
    """Upper bound on tokens in the reply."""
    settings: dict[str, Any] = field(default_factory=dict)
    """agent.yaml `modelSettings` that are set: `temperature`, `top_p`, `seed`, `stop`, and
    `prompt_caching` (never sent as it is): `False` turns prompt caching off, `True` sends
    OpenAI's `prompt_cache_key` to a compatible server too; unset, caching is on wherever the
    provider is known to take it (Anthropic's breakpoints, OpenAI's own API)."""
    cache_key: str | None = None
    """What requests that share a prompt prefix have in common (the run's or thread's id), for
    providers that route on it (OpenAI's `prompt_cache_key`); `None`: the provider derives one
    from the model, instructions and tools."""
    on_delta: Callable[[dict[str, Any]], None] | None = field(
        default=None, repr=False, compare=False
    )
    """Called with each piece of the reply as it streams in, when set; never serialised.

    A provider that can stream then asks for the reply as server-sent events and calls it
    synchronously, in order, with `{"type": "text_delta", "text": fragment}` per piece of text
    and `{"type": "tool_call_delta", "index": i, "id": id, "name": name, "arguments": fragment}`
    per piece of a tool call's arguments (`index` is the call's place in `ModelReply.tool_calls`;
    `id` and `name` are set on the first delta of a call, None after). It still returns the
    whole `ModelReply`; the text deltas joined are its `content`. `None`: no streaming."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema the final answer must match, for a provider that takes it natively
    (OpenAI's `response_format`); `toren.worker.models._output` sets it, or asks another way."""
    output_name: str = "output"
    """The schema's name, where the provider wants one."""


@dataclass
class ModelReply:
    """A model's answer: an assistant message (text and/or tool calls) and token usage."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    finish_reason: str = ""
    """Why the model stopped, in OpenAI's words whatever the provider: `stop`, `tool_calls`,
    `length` (`CUT_AT_MAX_TOKENS`: its text or a tool call's arguments may be incomplete), or
    the provider's own value for anything else; empty when the provider said nothing."""
    provider_calls: list[dict[str, Any]] = field(default_factory=list)
    """Calls of tools the provider ran itself, with their results (never run by toren)."""
    provider_content: dict[str, Any] | None = None
    """`{provider: reply}` verbatim, when the provider needs it back (it ran a tool)."""

    def message(self) -> Message:
        """The transcript message for this reply."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.provider_calls:
            message["provider_calls"] = self.provider_calls
        if self.provider_content:
            message["provider_content"] = self.provider_content
        return message


class ModelProvider(Protocol):
    """Anything that can answer a `ModelRequest`."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer one request; raise `ModelHTTPError` on a failed call, never retry."""
        ...


CACHE_KEYS = ("cache_read_tokens", "cache_write_tokens")
"""Usage keys a reply has only when the provider read or wrote its prompt cache."""


def usage(
    input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
) -> dict[str, int]:
    """A reply's usage, the same for every provider.

    `input_tokens` counts the whole prompt, the part read from or written to the provider's
    cache included (OpenAI reports it so; Anthropic reports the three parts apart);
    `cache_read_tokens` and `cache_write_tokens` say how much of it was, and are there only when
    non-zero (a reply without caching has the two keys it always had).
    """
    counted = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    for key, value in zip(CACHE_KEYS, (cache_read, cache_write), strict=True):
        if value:
            counted[key] = value
    return counted


def arguments_object(arguments: Any) -> dict[str, Any] | None:
    """A tool call's arguments as the JSON object they hold, or `None` when they hold none.

    A reply cut at `max_tokens` can end inside the arguments (`"{"`); the workflow tells the
    model, but the call itself goes back to the provider in the next request, and a server
    that parses it (llama.cpp does) rejects the whole request every time. So a provider sends
    `{}` in place of arguments that are not an object.
    """
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def system_folded(request: ModelRequest) -> tuple[str, list[Message]]:
    """The system prompt and transcript of `request`, its `system` messages moved into the prompt.

    For APIs with no system role in their messages (Anthropic, Gemini, Bedrock): each system
    message's text is appended to `request.system`, in transcript order, a blank line between.
    """
    said = [str(m.get("content") or "") for m in request.messages if m.get("role") == "system"]
    if not said:
        return request.system, request.messages
    system = "\n\n".join(part for part in (request.system, *said) if part.strip())
    return system, [m for m in request.messages if m.get("role") != "system"]


def replayed(reply: ModelReply, on_delta: Callable[[dict[str, Any]], None]) -> ModelReply:
    """`reply`, its text and each tool call given to `on_delta` whole, as one delta each.

    For a streamed request whose reply came whole (a server that ignores `stream`): the live
    output still sees it, in the shapes `ModelRequest.on_delta` describes.
    """
    if reply.content:
        on_delta({"type": "text_delta", "text": reply.content})
    for index, call in enumerate(reply.tool_calls):
        on_delta(
            {"type": "tool_call_delta", "index": index, "id": call["id"], "name": call["name"],
             "arguments": call["arguments"]}
        )  # fmt: skip
    return reply
