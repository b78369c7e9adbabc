"""Bedrock's Converse format: toren's neutral request in, a Converse reply out.

```python
params = converse_params(request)        # keyword arguments of `converse` / `converse_stream`
reply = parse_reply(response, request.model)
```

The transcript maps onto Converse messages: assistant text and tool calls become `text` and
`toolUse` blocks, tool results `toolResult` blocks (`status: error` for a failed call) in the
user turn that follows, and turns of the same role are merged so the roles alternate as the API
requires. The system prompt goes in `system`, tools in `toolConfig.tools[].toolSpec`, sampling
settings in `inferenceConfig`.

A typed output asked for as a tool (`toren.worker.models._output`) is forced through
`toolChoice` on the models that take it (Anthropic's, Amazon Nova, Mistral Large): `tool` when it
is the only tool, `any` when the agent has others (the model calls a tool every turn and ends by
calling `final_output`). Other models get the instruction only, as Anthropic's own API does.

Reasoning blocks (`reasoningContent`, with their signature) are kept verbatim in
`provider_content["bedrock"]` and sent back as they came: within a tool loop the model wants them.
"""

from __future__ import annotations

import json
from typing import Any

from toren.agent._output_config import FINAL_OUTPUT_TOOL
from toren.agent._types import CUT_AT_MAX_TOKENS
from toren.worker.models._base import (
    Message,
    ModelReply,
    ModelRequest,
    arguments_object,
    system_folded,
    usage,
)

__all__ = ["FINISH_REASONS", "converse_params", "parse_reply", "tool_choice_models"]

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": CUT_AT_MAX_TOKENS,
    # The reply filled what was left of the window: cut, as at `maxTokens`.
    "model_context_window_exceeded": CUT_AT_MAX_TOKENS,
}
"""Converse's `stopReason` → `ModelReply.finish_reason` (others, e.g. `guardrail_intervened`
and `content_filtered`, are kept as they are)."""

TOOL_CHOICE_MODELS = ("anthropic.", "amazon.nova", "mistral.mistral-large")
"""Model ids (after an inference profile's region prefix) that take `toolChoice` `any`/`tool`."""

EMPTY_RESULT = "(no output)"
"""A tool result's text when it is empty: Converse refuses a blank text block."""

SETTINGS = {"temperature": "temperature", "top_p": "topP", "stop": "stopSequences"}
"""`ModelRequest.settings` names → `inferenceConfig` names. `seed` has no Converse equivalent
(agent.yaml refuses it for bedrock/ models; one a `--model` switch brings is dropped)."""


def tool_choice_models(model: str) -> bool:
    """Whether `model` (a model id, an inference profile id or ARN) takes a forced tool."""
    return any(family in model for family in TOOL_CHOICE_MODELS)


def converse_params(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of `converse` (and `converse_stream`) for `request`.

    Raises:
        ValueError: A message has a role other than user, assistant, tool or system (a system
            message joins the `system` blocks), or a user content block Converse cannot carry.
    """
    system, messages = system_folded(request)
    params: dict[str, Any] = {
        "modelId": request.model,
        "messages": _messages(messages),
    }
    caching = request.settings.get("prompt_caching") is True
    if system:
        params["system"] = [{"text": system}]
        if caching:
            params["system"].append({"cachePoint": {"type": "default"}})
    inference: dict[str, Any] = {"maxTokens": request.max_tokens}
    for name, value in request.settings.items():
        if name in SETTINGS and value is not None:
            inference[SETTINGS[name]] = value
    params["inferenceConfig"] = inference
    tools = [_tool(tool) for tool in request.tools]
    if tools:
        if caching:
            tools.append({"cachePoint": {"type": "default"}})
        params["toolConfig"] = {"tools": tools}
        choice = _forced(request)
        if choice:
            params["toolConfig"]["toolChoice"] = choice
    elif _uses_tools(params["messages"]):
        # Converse refuses toolUse/toolResult blocks without a toolConfig (a call with no tools,
        # e.g. a summary of the thread): the tools the transcript used are declared, loosely.
        names = dict.fromkeys(
            block["toolUse"]["name"]
            for turn in params["messages"]
            for block in turn["content"]
            if "toolUse" in block
        )
        params["toolConfig"] = {"tools": [_tool({"name": name}) for name in names]}
    return params


def parse_reply(data: Any, model: str) -> ModelReply:
    """Turn a Converse response (or a stream assembled into one) into a `ModelReply`.

    Raises:
        ValueError: The response holds no message content (also KeyError, TypeError and friends
            for other shapes that are not a Converse response).
    """
    if not isinstance(data, dict):
        raise ValueError("the response is not an object")
    blocks = data["output"]["message"]["content"]
    if not isinstance(blocks, list):
        raise ValueError(f"no content list; got {type(blocks).__name__}")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if "text" in block:
            texts.append(str(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            raw = use.get("raw_input")
            calls.append(
                {
                    "id": str(use["toolUseId"]),
                    "name": str(use["name"]),
                    "arguments": raw if raw is not None else json.dumps(use.get("input") or {}),
                }
            )
    stop_reason = str(data.get("stopReason") or "")
    verbatim = [_without_raw(block) for block in blocks]
    return ModelReply(
        content="".join(texts),
        tool_calls=calls,
        usage=_usage(data.get("usage") or {}),
        model=model,
        finish_reason=FINISH_REASONS.get(stop_reason, stop_reason),
        provider_content=(
            {"bedrock": verbatim} if any("reasoningContent" in b for b in blocks) else None
        ),
    )


def _usage(reported: dict[str, Any]) -> dict[str, int]:
    """Converse's usage in toren's terms: the whole prompt in `input_tokens`.

    Like Anthropic's API, Converse counts the prompt's cached parts apart from `inputTokens`
    (`totalTokens` is the sum of the four): they are added to it.
    """
    read = int(reported.get("cacheReadInputTokens") or 0)
    written = int(reported.get("cacheWriteInputTokens") or 0)
    return usage(
        int(reported.get("inputTokens") or 0) + read + written,
        int(reported.get("outputTokens") or 0),
        cache_read=read,
        cache_write=written,
    )


def _forced(request: ModelRequest) -> dict[str, Any] | None:
    names = [str(tool.get("name")) for tool in request.tools]
    if FINAL_OUTPUT_TOOL not in names or not tool_choice_models(request.model):
        return None
    if len(names) == 1:
        return {"tool": {"name": FINAL_OUTPUT_TOOL}}
    return {"any": {}}


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("provider"):
        raise ValueError(
            f"tool {tool.get('name')!r} is run by {tool['provider']!r}, not by Bedrock: "
            "a bedrock/ model cannot use it"
        )
    spec: dict[str, Any] = {
        "name": tool["name"],
        "inputSchema": {"json": tool.get("parameters") or {"type": "object", "properties": {}}},
    }
    if tool.get("description"):
        spec["description"] = tool["description"]  # Converse refuses an empty one
    return {"toolSpec": spec}


def _uses_tools(turns: list[dict[str, Any]]) -> bool:
    return any("toolUse" in block for turn in turns for block in turn["content"])


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks: list[dict[str, Any]] = []
        verbatim = (message.get("provider_content") or {}).get("bedrock")
        if role == "assistant" and isinstance(verbatim, list):
            blocks.extend(verbatim)
        elif role == "assistant":
            text = str(message.get("content") or "")
            if text.strip():
                blocks.append({"text": text})
            for call in message.get("tool_calls") or []:
                blocks.append(
                    {"toolUse": {"toolUseId": call["id"], "name": call["name"],
                                 "input": arguments_object(call.get("arguments")) or {}}}
                )  # fmt: skip
        elif role == "tool":
            content = message.get("content", "")
            text = content if isinstance(content, str) else json.dumps(content)
            blocks.append(
                {"toolResult": {
                    "toolUseId": message["tool_call_id"],
                    "content": [{"text": text if text.strip() else EMPTY_RESULT}],
                    "status": "error" if message.get("is_error") else "success",
                }}
            )  # fmt: skip
        elif role == "user":
            blocks.extend(_user_blocks(message.get("content", "")))
        else:
            raise ValueError(f"message role {role!r} is not one of user, assistant, tool")
        if not blocks:
            continue  # Converse refuses an empty turn; it carries nothing anyway
        wire_role = "assistant" if role == "assistant" else "user"
        if out and out[-1]["role"] == wire_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": wire_role, "content": blocks})
    return out


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        text = str(content)
        return [{"text": text}] if text.strip() else []
    blocks = []
    for block in content:
        # Content blocks in Anthropic's shape (the one toren's user content lists use).
        if isinstance(block, dict) and block.get("type") == "text":
            if str(block.get("text") or "").strip():
                blocks.append({"text": str(block["text"])})
        else:
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise ValueError(f"a user content block of type {kind!r}: Bedrock takes text only")
    return blocks


def _without_raw(block: dict[str, Any]) -> dict[str, Any]:
    """`block` as Converse takes it back: a cut tool call's raw text is toren's, not the API's."""
    if "toolUse" in block and "raw_input" in block["toolUse"]:
        use = {k: v for k, v in block["toolUse"].items() if k != "raw_input"}
        return {"toolUse": use}
    return block
