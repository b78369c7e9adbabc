"""The Responses API's wire format (`modelSettings: {api: responses}`): body, reply, events.

Stateless: each call sends the whole transcript as input items (`store: false`, never a
`previous_response_id`), so the history stays provider-neutral and any worker can make the next
call. A tool call is a `function_call` item, its result a `function_call_output` item.

A reasoning model's reasoning items go back in the next request of a tool loop (the model keeps
its train of thought). With `store: false` the server keeps nothing, so they can go back only
encrypted: a request with `reasoning_effort` set asks for `reasoning.encrypted_content`, and the
reply keeps each reasoning item that has it in `provider_content["openai"]`, with where it came
from: `{"origin": "openai", "model": "o4-mini", "items": [...]}` (`origin`: `openai` for OpenAI's
API, `azure` for Azure OpenAI, `openai-compatible` for another server). They go back verbatim
before that turn's calls only to the same origin and model: the content is encrypted for them,
and another endpoint or model refuses the whole request (a thread moved to `azure/`, or to
another model, continues without them). Reasoning items without it are dropped: the next call
works without them.

A hosted `web_search` (a provider tool, `toren.worker.models._hosted`) goes out as the
Responses API's `web_search` tool, its sources asked for (`web_search_call.action.sources`).
Each `web_search_call` output item becomes a readable `provider_calls` entry (arguments: the
action, e.g. `{"type": "search", "query": ...}`; result: its sources' URLs, or its status). The
model's answer already holds what it found: the items go back only beside kept reasoning items
(in their place, to the same origin and model), since a reasoning item wants the item that
followed it.

Streamed, the reply is typed events (`response.output_text.delta`,
`response.output_item.added`, `response.function_call_arguments.delta`, ...) ending in
`response.completed`, `response.incomplete` or `response.failed`, each of which carries the
whole response: that is what is parsed, the deltas only go to `on_delta`. Other events (reasoning
summaries, content parts, `response.web_search_call.*` progress) are ignored; an `error` event
fails the call, retryably.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from toren.worker._http import error_message
from toren.worker.models._base import Message, ModelReply, ModelRequest, arguments_object, usage
from toren.worker.models._hosted import hosted_declaration
from toren.worker.models._sse import SNIPPET_CHARS, ServerSentEvent, StreamError, json_data

__all__ = ["ResponsesStream", "parse_response", "responses_body"]

_ENDS = ("response.completed", "response.incomplete", "response.failed")
"""The events that end a streamed response; each carries the whole response."""

_SENT = {"temperature": "temperature", "top_p": "top_p"}
"""toren's settings the Responses API takes under the same name (agent.yaml refuses `seed` and
`stop` with `api: responses`: the API has neither)."""


def responses_body(request: ModelRequest, official: bool, origin: str) -> dict[str, Any]:
    """The Responses API body for `request`; `official`: it goes to OpenAI's own API.

    `origin` (`openai`, `azure`, `openai-compatible`) and `request.model` pick the reasoning
    items that go back: only those kept from a reply of the same origin and model.

    Raises:
        ValueError: A tool is one that another provider runs, or that OpenAI does not.
    """
    body: dict[str, Any] = {
        "model": request.model,
        "input": [item for m in request.messages for item in _items(m, origin, request.model)],
        "max_output_tokens": request.max_tokens,
        "store": False,
        **{_SENT[k]: v for k, v in request.settings.items() if k in _SENT},
    }
    if request.system:
        body["instructions"] = request.system
    include: list[str] = []
    effort = request.settings.get("reasoning_effort")
    if effort:
        body["reasoning"] = {"effort": effort}
        include.append("reasoning.encrypted_content")
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
        if any(tool.get("provider") for tool in request.tools):
            include.append("web_search_call.action.sources")
    if include:
        body["include"] = include
    if request.output_schema is not None:
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": request.output_name,
                "schema": request.output_schema,
                "strict": False,
            }
        }
    caching = request.settings.get("prompt_caching")
    if caching or (caching is None and official):
        body["prompt_cache_key"] = request.cache_key or _cache_key(body)
    return body


def parse_response(data: Any, model: str, origin: str) -> ModelReply:
    """Turn a Responses API `response` object into a `ModelReply`.

    `model` is the model asked for; with `origin` it is kept beside the reasoning items.

    Raises:
        ValueError: It is not a response, or it failed (also KeyError, TypeError and friends).
    """
    if not isinstance(data, dict):
        raise ValueError("the body is not a JSON object")
    output = data.get("output")
    if data.get("status") == "failed" or not isinstance(output, list):
        raise ValueError(f"no output; {error_message(data) or 'got ' + str(sorted(data))}")
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    hosted: list[dict[str, Any]] = []
    searches: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    text.append(str(part.get("text") or ""))
                elif part.get("type") == "refusal":
                    text.append(str(part.get("refusal") or ""))
        elif kind == "function_call":
            calls.append(
                {"id": item.get("call_id") or item.get("id") or f"call_{len(calls) + 1}",
                 "name": item["name"], "arguments": _text(item.get("arguments") or "")}
            )  # fmt: skip
        elif kind == "reasoning" and item.get("encrypted_content"):
            kept.append(item)
        elif kind == "web_search_call":
            hosted.append(_searched(item, len(hosted)))
            searches.append(item)
    reported = data.get("usage") or {}
    return ModelReply(
        content="".join(text),
        tool_calls=calls,
        usage=usage(
            int(reported.get("input_tokens") or 0),
            int(reported.get("output_tokens") or 0),
            cache_read=int((reported.get("input_tokens_details") or {}).get("cached_tokens") or 0),
        ),
        model=str(data.get("model") or model),
        finish_reason=_finish(data, calls),
        provider_calls=hosted,
        provider_content=(
            # The searches in their place among the reasoning items they may follow.
            {
                "openai": {
                    "origin": origin,
                    "model": model,
                    "items": [i for i in output if i in kept or i in searches],
                }
            }
            if kept
            else None
        ),  # fmt: skip
    )


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("provider"):
        return hosted_declaration(
            str(tool["provider"]), str(tool["name"]), dict(tool.get("provider_options") or {})
        )
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        # Not strict: strict mode refuses schemas with optional properties.
        "strict": False,
    }


def _searched(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A `web_search_call` output item as a readable provider call."""
    action = dict(item.get("action") or {})
    sources = action.pop("sources", None) or []
    urls = [str(s.get("url")) for s in sources if isinstance(s, dict) and s.get("url")]
    status = str(item.get("status") or "")
    return {
        "id": str(item.get("id") or f"ws_{index + 1}"),
        "name": "web_search",
        "arguments": json.dumps(action),
        "provider": "openai",
        "result": "\n".join(urls) or status,
        "is_error": status in ("failed", "incomplete"),
    }


class ResponsesStream:
    """Reads a streamed response: deltas for `on_delta`, and the whole response at its end."""

    def __init__(self) -> None:
        self.done = False
        """Whether the event that ends the response has come."""
        self._final: dict[str, Any] | None = None
        self._calls: dict[int, int] = {}
        """`output_index` of each function call → its place in the reply's tool calls."""

    def feed(self, event: ServerSentEvent) -> list[dict[str, Any]]:
        """Take the next event; return its deltas (see `ModelRequest.on_delta`)."""
        if not event.data.strip():
            return []
        data = json_data(event)
        if not isinstance(data, dict):
            raise ValueError("the data is not a JSON object")
        kind = data.get("type") or event.event
        if kind == "error":
            found = error_message(data) or repr(event.data[:SNIPPET_CHARS])
            raise StreamError(f"sent an error event mid-stream: {found}")
        if kind == "response.output_text.delta":
            return [{"type": "text_delta", "text": str(data["delta"])}] if data["delta"] else []
        if kind == "response.output_item.added" and data["item"].get("type") == "function_call":
            item = data["item"]
            index = self._calls[int(data["output_index"])] = len(self._calls)
            return [{"type": "tool_call_delta", "index": index,
                     "id": item.get("call_id") or item.get("id"), "name": item["name"],
                     "arguments": _text(item.get("arguments") or "")}]  # fmt: skip
        if kind == "response.function_call_arguments.delta" and data["delta"]:
            index = self._calls[int(data["output_index"])]
            return [{"type": "tool_call_delta", "index": index, "id": None, "name": None,
                     "arguments": str(data["delta"])}]  # fmt: skip
        if kind in _ENDS:
            self._final = data["response"]
            self.done = True
        return []

    def reply(self, parse: Callable[[Any], ModelReply]) -> ModelReply:
        """The whole reply: the response the last event carried, through `parse`."""
        return parse(self._final)


def _finish(data: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    """The reply's end in Chat Completions' words (`ModelReply.finish_reason`)."""
    if data.get("status") == "incomplete":
        reason = str((data.get("incomplete_details") or {}).get("reason") or "incomplete")
        return "length" if reason == "max_output_tokens" else reason
    return "tool_calls" if calls else "stop"


def _items(message: Message, origin: str, model: str) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message["tool_call_id"],
                 "output": _text(message.get("content", ""))}]  # fmt: skip
    if role != "assistant":
        return [{"role": role, "content": message.get("content", "")}]
    items = _reasoning((message.get("provider_content") or {}).get("openai"), origin, model)
    if message.get("content"):
        items.append({"role": "assistant", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        # `{}` for arguments that are not an object (`arguments_object`): a server that parses
        # them would refuse the whole request.
        arguments = call["arguments"] if arguments_object(call["arguments"]) is not None else "{}"
        items.append({"type": "function_call", "call_id": call["id"], "name": call["name"],
                      "arguments": _text(arguments)})  # fmt: skip
    return items


def _reasoning(kept: Any, origin: str, model: str) -> list[dict[str, Any]]:
    """The encrypted reasoning items `kept` from a reply, when it came from `origin`'s `model`."""
    if not isinstance(kept, dict) or (kept.get("origin"), kept.get("model")) != (origin, model):
        return []
    return [dict(item) for item in kept.get("items") or []]


def _cache_key(body: dict[str, Any]) -> str:
    """A key for requests that share their prefix, when the run gave none (see `_openai_chat`)."""
    prefix = json.dumps(
        [body["model"], body.get("instructions"), body.get("tools")], sort_keys=True
    )
    return "toren-" + hashlib.sha256(prefix.encode()).hexdigest()[:32]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
