"""A ConverseStream reply, read event by event into the response `converse` would have sent.

The stream sends `messageStart`, then per content block an optional `contentBlockStart` (a tool
call's id and name; text blocks have none), its `contentBlockDelta`s (`text`, `toolUse.input`
fragments of JSON, `reasoningContent`) and `contentBlockStop`, then `messageStop` (the stop
reason) and `metadata` (usage). An exception event mid-stream is raised by botocore itself
(`EventStreamError`). Unknown events are ignored; an unknown delta on a text or tool block fails
the call (retryably): the reply would silently lack part of the answer.

```python
stream = BedrockStream()
for event in events:
    for delta in stream.feed(event):
        on_delta(delta)
reply = stream.reply(lambda body: parse_reply(body, model))   # once `stream.done`
```
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from toren.worker.models._base import ModelReply

__all__ = ["BedrockStream"]


class BedrockStream:
    """Reads a ConverseStream into the response the non-streaming API would have sent."""

    def __init__(self) -> None:
        self.done = False
        """Whether `messageStop` has come (a `metadata` event with usage may follow it)."""
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._calls: dict[int, int] = {}
        """Block index → the call's place in `ModelReply.tool_calls` (the deltas' `index`)."""
        self._stop_reason = ""
        self._usage: dict[str, Any] = {}

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """Take the next event; return its deltas (see `ModelRequest.on_delta`).

        Raises:
            ValueError: An event of the wrong shape, or a delta toren cannot read (also
                KeyError, TypeError and friends).
        """
        if "contentBlockStart" in event:
            data = event["contentBlockStart"]
            return self._start(int(data["contentBlockIndex"]), data.get("start") or {})
        if "contentBlockDelta" in event:
            data = event["contentBlockDelta"]
            return self._delta(int(data["contentBlockIndex"]), data["delta"])
        if "messageStop" in event:
            self._stop_reason = str(event["messageStop"].get("stopReason") or "")
            self.done = True
        elif "metadata" in event:
            self._usage = dict(event["metadata"].get("usage") or {})
        return []  # messageStart, contentBlockStop, and any event Bedrock adds later

    def _start(self, index: int, start: dict[str, Any]) -> list[dict[str, Any]]:
        if "toolUse" not in start:
            return []
        use = start["toolUse"]
        self._blocks[index] = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
        self._json[index] = []
        self._calls[index] = len(self._calls)
        call = {"index": self._calls[index], "id": str(use["toolUseId"]), "name": str(use["name"])}
        return [{"type": "tool_call_delta", **call, "arguments": ""}]

    def _delta(self, index: int, delta: dict[str, Any]) -> list[dict[str, Any]]:
        block = self._blocks.get(index)
        if "text" in delta:
            if block is None:
                block = self._blocks[index] = {"text": ""}
            if "text" not in block:
                raise ValueError(f"a text delta for block {index}, which is not text")
            text = str(delta["text"])
            block["text"] += text
            return [{"type": "text_delta", "text": text}] if text else []
        if "toolUse" in delta:
            if index not in self._calls:
                raise ValueError(f"a toolUse delta for block {index}, which is no tool call")
            fragment = str(delta["toolUse"].get("input") or "")
            self._json[index].append(fragment)
            if not fragment:
                return []
            return [{"type": "tool_call_delta", "index": self._calls[index], "id": None,
                     "name": None, "arguments": fragment}]  # fmt: skip
        if "reasoningContent" in delta:
            if block is None:
                block = self._blocks[index] = {"reasoningContent": {}}
            self._reason(block, delta["reasoningContent"])
            return []
        if block is not None and ("text" in block or "toolUse" in block):
            raise ValueError(f"a {sorted(delta)} delta on a block toren reads")
        return []  # a delta of a block toren does not read (citations)

    @staticmethod
    def _reason(block: dict[str, Any], delta: dict[str, Any]) -> None:
        content = block["reasoningContent"]
        if "redactedContent" in delta:
            content["redactedContent"] = delta["redactedContent"]
            return
        text = content.setdefault("reasoningText", {"text": ""})
        text["text"] += str(delta.get("text") or "")
        if delta.get("signature"):
            text["signature"] = delta["signature"]

    def reply(self, parse: Callable[[Any], ModelReply]) -> ModelReply:
        """The whole reply, once `done`: the events as one Converse response, through `parse`."""
        for index, parts in self._json.items():
            raw = "".join(parts)
            use = self._blocks[index]["toolUse"]
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                use["input"] = parsed
            else:
                # Cut at maxTokens mid-input: the call keeps the model's text, so the workflow
                # tells the model its arguments are invalid; the block sent back holds `{}`.
                use["input"] = {}
                use["raw_input"] = raw
        content = [self._blocks[i] for i in sorted(self._blocks)]
        return parse(
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": self._stop_reason,
                "usage": self._usage,
            }
        )
