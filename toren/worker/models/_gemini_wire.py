"""Gemini's wire format: toren's neutral request as `generate_content` arguments, and back.

The transcript becomes `contents` (role `user` or `model`): an assistant turn's tool calls are
`function_call` parts, the tool results after it `function_response` parts of one `user` turn,
keyed by the tool's name (Gemini pairs a result with its call by name and order, not by id).
Gemini's calls carry no id on most models, so a reply's calls get ids of toren's own,
`toren-gc-<hash>`: the same reply always gets the same ids, and two calls differ in theirs.
An id the model did send is kept and sent back with the call's result.

A model that thinks (2.5 and later) signs its parts (`thought_signature`), and wants them back
as they came within a tool loop: such a reply keeps its parts verbatim in
`provider_content["gemini"]`, and they go back in its place.

A hosted `web_search` (a provider tool of family `gemini`, `toren.worker.models._hosted`) goes
out as the `google_search` tool (grounding with Google Search). The candidate's
`grounding_metadata` becomes one `provider_calls` entry: the queries Gemini ran as its
arguments, the pages it grounded on (`title — uri`) as its result. Nothing goes back: the
answer holds what was found. Gemini refuses it beside function declarations on its 2.x models,
so such a request is refused before it is sent (the agent loader refuses the agent first).

```python
contents, config = request_arguments(request)
parts = ReplyParts(request)
deltas = parts.feed(response)        # per streamed chunk, or once for the whole response
reply = parts.reply()
```
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from toren.worker.models._base import (
    Message,
    ModelReply,
    ModelRequest,
    arguments_object,
    system_folded,
    usage,
)
from toren.worker.models._hosted import GEMINI_MIX, hosted_declaration

__all__ = ["GENERATED_ID", "MALFORMED", "ReplyParts", "request_arguments"]

GENERATED_ID = "toren-gc-"
"""The start of a call id toren made up (the model sent none); never sent back to Gemini."""

_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}
"""Gemini's finish reasons that have an OpenAI name; the others are kept, lowercased."""

MALFORMED = "malformed_function_call"
"""The finish reason of a reply whose tool call Gemini could not parse: no answer at all (the
same request, sampled again, usually succeeds), so the provider raises a retryable error."""


def request_arguments(request: ModelRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`contents` and `config` for `generate_content`, from `request`.

    Raises:
        ValueError: A tool is a hosted one beside function tools, or one Gemini does not run
            (the agent loader refuses such an agent first, `toren.worker.models._hosted`).
    """
    hosted = [t for t in request.tools if t.get("provider")]
    functions = [t for t in request.tools if not t.get("provider")]
    if hosted and functions:
        raise ValueError(
            f"{GEMINI_MIX}: hosted {[t['name'] for t in hosted]} beside function tools "
            f"{[t['name'] for t in functions]}"
        )
    settings = request.settings
    config: dict[str, Any] = {
        "max_output_tokens": request.max_tokens,
        # The SDK would call Python functions itself when given them; toren's loop calls tools.
        "automatic_function_calling": {"disable": True},
        # Else the SDK resends the request when a stream drops or pauses: Temporal owns retries.
        "automatic_continuation": False,
    }
    system, messages = system_folded(request)
    if system:
        config["system_instruction"] = system
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed")):
        if settings.get(ours) is not None:
            config[theirs] = settings[ours]
    if settings.get("stop"):
        config["stop_sequences"] = list(settings["stop"])
    if settings.get("thinking_budget_tokens"):
        config["thinking_config"] = {"thinking_budget": settings["thinking_budget_tokens"]}
    if hosted:
        config["tools"] = [
            hosted_declaration(
                str(t["provider"]), str(t["name"]), dict(t.get("provider_options") or {})
            )
            for t in hosted
        ]
    if functions:
        config["tools"] = [
            {
                "function_declarations": [
                    {
                        "name": tool["name"],
                        "description": tool.get("description", ""),
                        # JSON Schema as it is: Gemini takes it whole under this name.
                        "parameters_json_schema": tool.get("parameters")
                        or {"type": "object", "properties": {}},
                    }
                    for tool in functions
                ]
            }
        ]
    if request.output_schema is not None:
        config["response_mime_type"] = "application/json"
        config["response_json_schema"] = request.output_schema
    return _contents(messages), config


def _contents(messages: list[Message]) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            turn = {"role": "model", "parts": _model_parts(message)}
        elif role == "tool":
            turn = {"role": "user", "parts": [_result_part(message)]}
        else:
            content = message.get("content", "")
            text = content if isinstance(content, str) else json.dumps(content)
            turn = {"role": "user", "parts": [{"text": text}]}
        if not turn["parts"]:
            continue  # an empty reply: Gemini refuses a turn without parts
        if contents and contents[-1]["role"] == turn["role"]:
            # Results of one turn's calls, or a user's words after them: one turn for Gemini.
            contents[-1]["parts"].extend(turn["parts"])
        else:
            contents.append(turn)
    return contents


def _model_parts(message: Message) -> list[dict[str, Any]]:
    kept = (message.get("provider_content") or {}).get("gemini")
    if isinstance(kept, dict) and isinstance(kept.get("parts"), list):
        return [dict(part) for part in kept["parts"]]
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"text": str(message["content"])})
    for call in message.get("tool_calls") or []:
        function_call: dict[str, Any] = {
            "name": call["name"],
            # A cut reply's arguments may not be an object; Gemini wants one (`arguments_object`).
            "args": arguments_object(call.get("arguments")) or {},
        }
        if not str(call.get("id", "")).startswith(GENERATED_ID):
            function_call["id"] = call["id"]
        parts.append({"function_call": function_call})
    return parts


def _result_part(message: Message) -> dict[str, Any]:
    content = message.get("content", "")
    text = content if isinstance(content, str) else json.dumps(content)
    # Gemini's docs name the keys: `output` for a result, `error` for a failure.
    response = {"error": text} if message.get("is_error") else {"output": text}
    function_response: dict[str, Any] = {"name": message.get("name") or "", "response": response}
    call_id = str(message.get("tool_call_id") or "")
    if call_id and not call_id.startswith(GENERATED_ID):
        function_response["id"] = call_id
    return {"function_response": function_response}


class ReplyParts:
    """A reply read from one response or a stream of chunks; `reply()` is the `ModelReply`.

    Args:
        request: The request answered: its transcript seeds the made-up call ids.
    """

    def __init__(self, request: ModelRequest) -> None:
        last = request.messages[-1] if request.messages else None
        self._seed = f"{len(request.messages)}:{json.dumps(last, sort_keys=True, default=str)}"
        self._model = request.model
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._parts: list[dict[str, Any]] = []
        self._signed = False
        self._finish = ""
        self._finish_message = ""
        self._usage: Any = None
        self._version = ""
        self._grounding: Any = None

    def feed(self, response: Any) -> list[dict[str, Any]]:
        """Take one response (or streamed chunk), a `GenerateContentResponse`; return its deltas.

        The deltas are `ModelRequest.on_delta`'s: the chunk's text, and each call whole (Gemini
        sends a call in one chunk).

        Raises:
            AttributeError: The response is not one (also TypeError, ValueError).
        """
        deltas: list[dict[str, Any]] = []
        self._version = response.model_version or self._version
        self._usage = response.usage_metadata or self._usage
        candidates = response.candidates or []
        if not candidates:
            blocked = getattr(response.prompt_feedback, "block_reason", None)
            if blocked is not None:
                self._finish = f"prompt_blocked_{_name(blocked).lower()}"
            return deltas
        candidate = candidates[0]
        self._grounding = candidate.grounding_metadata or self._grounding
        if candidate.finish_reason is not None:
            self._finish = (
                _FINISH.get(_name(candidate.finish_reason), "")
                or _name(candidate.finish_reason).lower()
            )
            self._finish_message = candidate.finish_message or self._finish_message
        parts = (candidate.content.parts if candidate.content else None) or []
        for part in parts:
            self._parts.append(part.model_dump(mode="json", exclude_none=True))
            self._signed = self._signed or bool(part.thought_signature) or bool(part.thought)
            if part.thought:
                continue  # a thought summary: not the answer
            if part.text:
                self._text.append(part.text)
                deltas.append({"type": "text_delta", "text": part.text})
            if part.function_call is not None:
                deltas.append(self._call(part.function_call))
        return deltas

    def _call(self, function_call: Any) -> dict[str, Any]:
        index = len(self._calls)
        arguments = json.dumps(function_call.args or {})
        name = function_call.name or ""
        call_id = (
            function_call.id
            or GENERATED_ID
            + hashlib.sha256(f"{self._seed}:{index}:{name}:{arguments}".encode()).hexdigest()[:16]
        )
        self._calls.append({"id": call_id, "name": name, "arguments": arguments})
        return {"type": "tool_call_delta", "index": index, "id": call_id, "name": name,
                "arguments": arguments}  # fmt: skip

    @property
    def finished(self) -> bool:
        """Whether a finish reason came (a stream without one was cut off)."""
        return bool(self._finish)

    @property
    def malformed(self) -> str | None:
        """What Gemini said of a call it could not parse (`MALFORMED`), or `None`.

        Empty when it said nothing: the SDK drops `finishMessage` from the Gemini API's replies.
        """
        return self._finish_message if self._finish == MALFORMED else None

    def reply(self) -> ModelReply:
        """The whole reply, in toren's neutral terms."""
        finish = self._finish
        if self._calls and finish == "stop":
            finish = "tool_calls"  # Gemini says STOP after calls too
        return ModelReply(
            content="".join(self._text),
            tool_calls=self._calls,
            usage=_usage(self._usage),
            model=self._version or self._model,
            finish_reason=finish,
            provider_calls=self._searched(),
            provider_content={"gemini": {"parts": self._parts}} if self._signed else None,
        )

    def _searched(self) -> list[dict[str, Any]]:
        """The Google Search the reply was grounded on, as one provider call (or none)."""
        found = self._grounding
        queries = list((found.web_search_queries if found else None) or [])
        if not queries:
            return []
        pages = [
            f"{chunk.web.title or ''} — {chunk.web.uri or ''}".strip(" —")
            for chunk in found.grounding_chunks or []
            if chunk.web is not None
        ]
        arguments = json.dumps({"queries": queries})
        digest = hashlib.sha256(f"{self._seed}:search:{arguments}".encode()).hexdigest()[:16]
        return [{"id": f"toren-gs-{digest}", "name": "web_search", "arguments": arguments,
                 "provider": "gemini", "result": "\n".join(pages), "is_error": False}]  # fmt: skip


def _usage(reported: Any) -> dict[str, int]:
    if reported is None:
        return usage(0, 0)

    def count(*names: str) -> int:
        return sum(int(getattr(reported, name, None) or 0) for name in names)

    # The prompt count holds the cached part; thinking is billed as output.
    return usage(
        count("prompt_token_count", "tool_use_prompt_token_count"),
        count("candidates_token_count", "thoughts_token_count"),
        cache_read=count("cached_content_token_count"),
    )


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))
