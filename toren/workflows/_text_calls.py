"""A tool call written as text: found in a final answer, and sent back to the model once.

Small models (Qwen2.5-Coder on llama.cpp, say) sometimes write the call they mean to make as
their answer's text instead of through the provider's tool-calling interface:

```text
<tool_call>{"name": "refund_order", "arguments": {"order_id": "A-1"}}</tool_call>
```

Run as it stands, that text would end the run as its answer with nothing done. A final answer
that is nothing but such a call to a declared tool goes back to the model once as a correction
(a user message: nothing ran, use the tool-calling interface or answer in words). It is never
run as a call: an approval gate sees only real calls. An answer that repeats it right after the
correction ends the run as before. Pure and deterministic: the decision reads the recorded
reply and the recorded spec, and its one command is the `workflow.patched` marker of a run that
sends one back (older histories ended such a run with the text, and still replay).

The correction's message carries `tool_call_as_text: {"tool", "form", "calls"}`, which the next
model call's input records in history: `toren events` shows it as `ToolCallAsText`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from temporalio import workflow

from toren.agent._schema import validate_args
from toren.agent._spec import AgentSpec
from toren.agent._transcript import TranscriptRef
from toren.agent._types import RunState
from toren.workflows._output import parse_output

__all__ = ["PATCH", "TOOL_CALL_AS_TEXT", "TextCall", "correction", "find_text_call", "send_back"]

PATCH = "toren-tool-call-as-text"
"""The `workflow.patched` id: runs recorded before it end with a textual call as the answer."""

TOOL_CALL_AS_TEXT = "tool_call_as_text"
"""The key of a correction message: `{"tool", "form", "calls"}`."""

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.DOTALL)
"""A Markdown code fence around the whole answer (```json ... ```)."""

_HERMES = re.compile(r"\s*<tool_call>(.*?)</tool_call>\s*", re.DOTALL)
"""One Hermes-style call (Qwen, Hermes, many fine-tunes): a JSON object in `<tool_call>` tags."""

_MISTRAL = "[TOOL_CALLS]"
"""Mistral's marker, before a JSON list of calls (v3) or before each `name[ARGS]{...}` (v11)."""

_MISTRAL_NAMED = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[CALL_ID\][A-Za-z0-9]+)?\[ARGS\](?P<args>.*)$", re.DOTALL
)
_LLAMA_TAG = "<|python_tag|>"
"""Llama 3.x's prefix of a tool call."""

_CALL_KEYS = {"name", "arguments", "parameters", "type"}


@dataclass(frozen=True)
class TextCall:
    """A final answer that is only tool calls written as text."""

    tool: str
    """The first call's tool (a declared one, as every call's is)."""
    form: str
    """How it was written: `json`, `hermes`, `llama`, `mistral` or `openai`."""
    calls: int = 1
    """How many calls the text holds."""


def find_text_call(text: str, tools: Collection[str]) -> TextCall | None:
    """The tool calls `text` consists of, or None when it is an ordinary answer.

    Every call must name one of `tools` and give its arguments as a JSON object (or as JSON text
    holding one); the text holds nothing else (whitespace and a code fence around all of it
    aside). Forms: a JSON call `{"name", "arguments" | "parameters"}` or a list of them; Hermes
    `<tool_call>{...}</tool_call>` (one or more); Llama 3.x `{"type": "function", "name",
    "parameters"}`, optionally after `<|python_tag|>`; OpenAI's wire shape `{"type": "function",
    "function": {"name", "arguments"}}`; Mistral `[TOOL_CALLS][{...}]` and
    `[TOOL_CALLS]name[ARGS]{...}`.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        return None
    if body.startswith("<tool_call>"):
        return _calls(_hermes(body), tools, "hermes")
    if body.startswith(_MISTRAL):
        return _calls(_mistral(body), tools, "mistral")
    llama = body.startswith(_LLAMA_TAG)
    found = _calls(_json_calls(body.removeprefix(_LLAMA_TAG)), tools, "json")
    if found is not None and llama:
        return TextCall(found.tool, "llama", found.calls)
    return found


def correction(found: TextCall) -> dict[str, Any]:
    """The user message that sends `found` back to the model."""
    what = f"a call to `{found.tool}`"
    if found.calls > 1:
        what = f"{found.calls} tool calls (the first to `{found.tool}`)"
    return {
        "role": "user",
        "content": f"(toren: your answer was {what} written as text, so nothing ran. To call a "
        "tool, use the tool-calling interface; to answer, reply in plain words.)",
        TOOL_CALL_AS_TEXT: {"tool": found.tool, "form": found.form, "calls": found.calls},
    }


def send_back(
    spec: AgentSpec, run: RunState, transcript: TranscriptRef, message: dict[str, Any]
) -> bool:
    """Whether the final answer `message` went back to the model as a textual tool call.

    Once per final answer: not when `message` answers this very correction. It runs before the
    typed-output check (`toren.workflows._output`), and an agent with `output:` keeps an answer
    that matches its schema: it is the answer, whatever its keys.
    """
    if run.text_call_sent_back and run.step == run.text_call_sent_back + 1:
        # The model call right after the correction (whatever notices came between) wrote the
        # call as text again.
        return False
    text = str(message.get("content") or "")
    found = find_text_call(text, [tool.name for tool in spec.tools])
    if found is None or _is_typed_output(spec, text):
        return False
    if not workflow.patched(PATCH):
        return False
    sent = correction(found)
    transcript.append(sent, {"message": sent})
    run.text_call_sent_back = run.step
    return True


def _is_typed_output(spec: AgentSpec, text: str) -> bool:
    if spec.output_schema is None:
        return False
    value, problem = parse_output(text)
    return problem is None and validate_args(spec.output_schema, value, indexed=True) is None


def _calls(calls: list[Any] | None, tools: Collection[str], form: str) -> TextCall | None:
    """A `TextCall` when every item of `calls` is a call of a declared tool."""
    if not calls:
        return None
    names: list[str] = []
    llama = openai = False
    for call in calls:
        if _is_openai_shape(call):
            # OpenAI's own wire shape, copied into text: `{"type": "function", "function":
            # {"name", "arguments"}}` (an `id` beside it).
            call, openai = dict(call["function"]), True
        if not isinstance(call, dict) or not set(call) <= _CALL_KEYS:
            return None
        name = call.get("name")
        if not isinstance(name, str) or name not in tools:
            return None
        if ("arguments" in call) == ("parameters" in call):
            return None  # neither, or both
        arguments = call.get("arguments", call.get("parameters"))
        if isinstance(arguments, str):
            arguments = _json(arguments)  # the arguments as JSON text, as the API carries them
        if not isinstance(arguments, dict):
            return None
        if "type" in call:
            if call["type"] != "function":
                return None
            llama = True
        names.append(name)
    if form == "json" and (openai or llama):
        form = "openai" if openai else "llama"
    return TextCall(names[0], form, len(names))


def _is_openai_shape(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and call.get("type") == "function"
        and isinstance(call.get("function"), dict)
        and set(call) <= {"type", "function", "id"}
    )


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_calls(text: str) -> list[Any] | None:
    value = _json(text.strip())
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return value
    return None


def _hermes(body: str) -> list[Any] | None:
    calls: list[Any] = []
    at = 0
    while at < len(body):
        tag = _HERMES.match(body, at)
        if tag is None:
            return None  # words outside the tags
        value = _json(tag.group(1).strip())
        if not isinstance(value, dict):
            return None
        calls.append(value)
        at = tag.end()
    return calls


def _mistral(body: str) -> list[Any] | None:
    pieces = [p.strip() for p in body.split(_MISTRAL)[1:]]
    if len(pieces) == 1 and pieces[0][:1] in ("[", "{"):
        return _json_calls(pieces[0])  # v3: one marker, then JSON
    calls: list[Any] = []
    for piece in pieces:
        named = _MISTRAL_NAMED.match(piece)
        if named is None:
            return None
        calls.append({"name": named.group("name"), "arguments": _json(named.group("args"))})
    return calls
