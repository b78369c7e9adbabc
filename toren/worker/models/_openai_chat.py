"""Chat Completions' wire format: the request body, the reply, a streamed reply's events.

`toren.worker.models._openai` sends it through the `openai` SDK, to OpenAI, Azure OpenAI or any
compatible server (vLLM, Ollama, llama.cpp); this module only reads and writes the JSON, leniently
enough for the compatible servers' quirks (content-part lists, missing ids, objects as arguments).

Streamed (a request with `on_delta`), the reply is `chat.completion.chunk` data events ending in
`data: [DONE]`, usage in the last chunk (`stream_options.include_usage`). Chat Completions names
no events: a named one other than `error` (a compatible server's keep-alive, say) is ignored; an
`error` event, or a data event holding an `error` object, fails the call; a data event that is
neither a chunk (no `choices` list) nor an error is one toren cannot ignore safely (it may hold
part of the answer in a shape toren does not know): it fails the call too, retryably.

OpenAI caches a prompt's prefix by itself; a request carries `prompt_cache_key` (the run's or
thread's, `ModelRequest.cache_key`) so that calls sharing a prefix reach the same cache. It goes
to OpenAI's own API unless `settings["prompt_caching"]` is False, and to a compatible server
only when it is True (a strict server refuses a field it does not know). The usage counts the
prompt tokens read from the cache (`prompt_tokens_details.cached_tokens`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from toren.worker._http import error_message
from toren.worker.models._base import Message, ModelReply, ModelRequest, arguments_object, usage
from toren.worker.models._sse import SNIPPET_CHARS, ServerSentEvent, StreamError, json_data

__all__ = ["ChatStream", "chat_body", "parse_chat"]

_SENT = ("temperature", "top_p", "seed", "stop", "reasoning_effort")
"""toren's settings Chat Completions takes, under the same names. Others (`api`,
`prompt_caching`, and `thinking_budget_tokens`, which agent.yaml refuses here but a `--model`
switch from another provider brings) are never sent."""


def chat_body(request: ModelRequest, official: bool) -> dict[str, Any]:
    """The Chat Completions JSON body for `request`; `official`: it goes to OpenAI's own API.

    Raises:
        ValueError: A tool is one the provider runs: Chat Completions carries none (the
            agent loader refuses such an agent first, `toren.worker.models._hosted`).
    """
    hosted = [t["name"] for t in request.tools if t.get("provider")]
    if hosted:
        raise ValueError(
            f"tools {hosted} are run by a provider; OpenAI's Chat Completions API carries "
            "no hosted tools"
        )
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message(m) for m in request.messages)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        # `max_tokens` rather than `max_completion_tokens`: compatible servers know only the
        # former, and OpenAI still accepts it for non-reasoning models (a reasoning model,
        # named by `reasoning_effort`, refuses it).
        "max_completion_tokens" if "reasoning_effort" in request.settings else "max_tokens": (
            request.max_tokens
        ),
        **{k: v for k, v in request.settings.items() if k in _SENT and v is not None},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
                },
            }
            for tool in request.tools
        ]
    if request.output_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            # Not strict: OpenAI's strict mode refuses schemas with optional properties.
            "json_schema": {
                "name": request.output_name,
                "schema": request.output_schema,
                "strict": False,
            },
        }
    caching = request.settings.get("prompt_caching")
    if caching or (caching is None and official):
        body["prompt_cache_key"] = request.cache_key or _cache_key(body)
    return body


def parse_chat(data: Any, model: str) -> ModelReply:
    """Turn a Chat Completions response body into a `ModelReply`.

    Raises:
        ValueError: The body has no `choices[0].message` (also KeyError, TypeError and
            friends for other shapes that are not a chat completion).
    """
    if not isinstance(data, dict):
        raise ValueError("the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        # Some compatible servers answer 200 with an error object instead of a status.
        raise ValueError(f"no choices; {error_message(data) or 'got ' + str(sorted(data))}")
    message = choices[0]["message"]
    if not isinstance(message, dict):
        raise ValueError("choices[0].message is not an object")
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        calls.append(
            {
                # A few compatible servers omit ids; the transcript needs one to pair results.
                "id": call.get("id") or f"call_{i + 1}",
                "name": function["name"],
                # The raw JSON text: the workflow validates it, so invalid JSON is kept as is.
                "arguments": _text(function.get("arguments") or ""),
            }
        )
    reported = data.get("usage") or {}
    return ModelReply(
        content=_content(message.get("content")),
        tool_calls=calls,
        usage=usage(
            int(reported.get("prompt_tokens") or 0),
            int(reported.get("completion_tokens") or 0),
            # Part of `prompt_tokens` already; OpenAI bills no cache writes.
            cache_read=int((reported.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        ),
        model=str(data.get("model") or model),
        finish_reason=str(choices[0].get("finish_reason") or ""),
    )


class ChatStream:
    """Reads a streamed chat completion into the body the non-streaming API would have sent."""

    def __init__(self) -> None:
        self.done = False
        """Whether `data: [DONE]` has come."""
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._model: str | None = None

    def feed(self, event: ServerSentEvent) -> list[dict[str, Any]]:
        """Take the next event; return its deltas (see `ModelRequest.on_delta`)."""
        if event.event == "error":
            raise StreamError(f"sent an error event mid-stream: {_error_text(event)}")
        if event.event != "message":
            return []
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = json_data(event)
        if not isinstance(chunk, dict):
            raise ValueError("the data is not a JSON object")
        if chunk.get("error"):
            raise StreamError(f"sent an error mid-stream: {_error_text(event)}")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamError(
                f"sent a data event that is not a chat completion chunk (keys {sorted(chunk)})"
            )
        self._model = chunk.get("model") or self._model
        self._usage = chunk.get("usage") or self._usage
        deltas: list[dict[str, Any]] = []
        for choice in choices:
            if choice.get("index", 0) != 0:
                continue  # toren asks for one choice
            delta = choice.get("delta") or {}
            text = _content(delta.get("content"))
            if text:
                self._text.append(text)
                deltas.append({"type": "text_delta", "text": text})
            for position, call in enumerate(delta.get("tool_calls") or []):
                deltas.extend(self._call_delta(int(call.get("index", position)), call))
            self._finish = choice.get("finish_reason") or self._finish
        return deltas

    def _call_delta(self, index: int, call: dict[str, Any]) -> list[dict[str, Any]]:
        function = call.get("function") or {}
        fragment = _text(function.get("arguments") or "")
        known = self._calls.get(index)
        if known is None:
            self._calls[index] = {"id": call.get("id"), "name": function.get("name"),
                                  "arguments": [fragment]}  # fmt: skip
            return [{"type": "tool_call_delta", "index": index, "id": call.get("id"),
                     "name": function.get("name"), "arguments": fragment}]  # fmt: skip
        # Some servers repeat the id (or send the name late): keep the first of each.
        known["id"] = known["id"] or call.get("id")
        known["name"] = known["name"] or function.get("name")
        known["arguments"].append(fragment)
        if not fragment:
            return []
        return [{"type": "tool_call_delta", "index": index, "id": None, "name": None,
                 "arguments": fragment}]  # fmt: skip

    def reply(self, parse: Callable[[Any], ModelReply]) -> ModelReply:
        """The whole reply: the chunks as one chat completion, through `parse`."""
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call["name"]:
                raise ValueError(f"tool call {index} has no name")
            calls.append(
                {"id": call["id"], "type": "function",
                 "function": {"name": call["name"], "arguments": "".join(call["arguments"])}}
            )  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if calls:
            message["tool_calls"] = calls
        return parse(
            {
                "model": self._model,
                "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
                "usage": self._usage,
            }
        )


def _cache_key(body: dict[str, Any]) -> str:
    """A key for requests that share their prefix, when the run gave none.

    The model, the instructions and the tools: the same for every run of an agent.
    """
    messages = body["messages"]
    system = messages[0] if messages and messages[0]["role"] == "system" else None
    prefix = json.dumps([body["model"], system, body.get("tools")], sort_keys=True)
    return "toren-" + hashlib.sha256(prefix.encode()).hexdigest()[:32]


def _error_text(event: ServerSentEvent) -> str:
    try:
        found = error_message(json.loads(event.data))
    except ValueError:
        found = None
    return found or repr(event.data[:SNIPPET_CHARS])


def _message(message: Message) -> dict[str, Any]:
    role = message.get("role")
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        calls = message.get("tool_calls") or []
        if calls:
            # OpenAI wants null, not "", for a tool-calling turn without text.
            out["content"] = message.get("content") or None
            out["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": _arguments(call["arguments"])},
                }
                for call in calls
            ]
        return out
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": _text(message.get("content", "")),
        }
    # user, and any role the API knows that toren's format does not (e.g. "developer").
    return {"role": role, "content": message.get("content", "")}


def _arguments(arguments: Any) -> str:
    # The model's own text when it is a JSON object (byte for byte, as the server produced it),
    # else `{}`: a server that parses it would refuse the whole request (`arguments_object`).
    if arguments_object(arguments) is None:
        return "{}"
    return _text(arguments)


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        # Content-part lists, which some compatible servers return for plain text.
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _text(value: Any) -> str:
    # Arguments and tool results must be strings on the wire; some servers send objects.
    return value if isinstance(value, str) else json.dumps(value)
