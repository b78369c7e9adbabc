"""Asking a model for a typed final answer, the way its provider can.

`output_mode: auto` picks by provider: `native` for OpenAI-compatible servers (the request's
`response_format` carries the schema, `ModelRequest.output_schema`), `tool` for Anthropic (an
extra tool, `final_output`, whose input schema is the output's, and an instruction to answer by
calling it) and for Gemini (whose JSON mode, `native` there, some models refuse beside function
calling), and `native` for the mock models (which answer what their script says). `prompted`
(any provider; for a server that supports neither) adds an instruction with the schema to the
system prompt. Whatever the mode, the workflow validates the answer (`toren.workflows._output`).

In `tool` mode a reply whose only tool call is `final_output` becomes a plain text reply holding
its arguments (the JSON), so the transcript stays provider-neutral and the workflow sees a final
answer. A schema that is not an object is wrapped as `{"value": ...}` (a tool's input is an
object) and unwrapped here.

```python
request, answer = ask_for_output(request, schema, "Verdict", "auto", "anthropic")
reply = answer(await provider.complete(request))
```
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from toren.agent._output_config import FINAL_OUTPUT_TOOL
from toren.worker.models._base import ModelReply, ModelRequest, arguments_object

__all__ = ["ask_for_output", "mode_for"]

_BY_PROVIDER = {"anthropic": "tool", "gemini": "tool", "vertex": "tool", "bedrock": "tool"}
"""`auto`'s choice where it is not `native`."""
_NO_NATIVE = frozenset({"anthropic", "bedrock"})
"""Providers whose API takes no output schema (Converse has none): `native` there is `tool`."""
_WRAPPED = "value"


def mode_for(mode: str, provider: str) -> str:
    """The mode `mode` (agent.yaml `output_mode`) means for `provider`.

    `native` on Anthropic or Bedrock (agent.yaml refuses it, but `--model` can switch providers)
    is `tool`.
    """
    if mode == "auto":
        return _BY_PROVIDER.get(provider, "native")
    return "tool" if mode == "native" and provider in _NO_NATIVE else mode


def ask_for_output(
    request: ModelRequest, schema: dict[str, Any] | None, name: str, mode: str, provider: str
) -> tuple[ModelRequest, Callable[[ModelReply], ModelReply]]:
    """`request` asking for an answer matching `schema`, and what turns the reply into one."""
    if schema is None:
        return request, _same
    if (
        mode == "auto"
        and provider in ("gemini", "vertex")
        and any(tool.get("provider") for tool in request.tools)
    ):
        # Gemini's Google Search goes beside no function (`tool`) and, on 2.x, no JSON mode.
        mode = "prompted"
    mode = mode_for(mode, provider)
    if mode == "native":
        return dataclasses.replace(request, output_schema=schema, output_name=name), _same
    if mode == "prompted":
        said = (
            "When you give your final answer, answer with only a JSON value (no other text, "
            f"no code fence) that matches this JSON Schema:\n{json.dumps(schema)}"
        )
        return dataclasses.replace(request, system=_joined(request.system, said)), _same
    wrapped = schema.get("type") != "object"
    tool = {
        "name": FINAL_OUTPUT_TOOL,
        "description": f"Give your final answer ({name}). Call it once, alone, when you are done.",
        "parameters": {"type": "object", "properties": {_WRAPPED: schema}, "required": [_WRAPPED]}
        if wrapped
        else schema,
    }
    said = (
        f"When you have your final answer, give it by calling the tool `{FINAL_OUTPUT_TOOL}` "
        "(and no other tool in that turn) instead of answering in text."
    )
    asked = dataclasses.replace(
        request, system=_joined(request.system, said), tools=[*request.tools, tool]
    )
    return asked, lambda reply: _answered(reply, wrapped)


def _answered(reply: ModelReply, wrapped: bool) -> ModelReply:
    """`reply` as a text answer when its only tool call is `final_output`."""
    calls = reply.tool_calls
    if len(calls) != 1 or calls[0]["name"] != FINAL_OUTPUT_TOOL:
        return reply
    arguments = calls[0]["arguments"]
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    parsed = arguments_object(arguments)
    if wrapped and parsed is not None and _WRAPPED in parsed:
        text = json.dumps(parsed[_WRAPPED])
    return dataclasses.replace(
        reply,
        content=text,
        tool_calls=[],
        finish_reason="stop" if reply.finish_reason == "tool_calls" else reply.finish_reason,
        # The verbatim blocks hold the tool call, which the transcript no longer does: a
        # provider would want its result. The answer is final; only its text is kept.
        provider_content=None if not reply.provider_calls else reply.provider_content,
    )


def _joined(system: str, said: str) -> str:
    return f"{system.rstrip()}\n\n{said}" if system.strip() else said


def _same(reply: ModelReply) -> ModelReply:
    return reply
