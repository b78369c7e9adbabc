"""Models that need no provider: `mock/echo` and scripted models for tests and the demo.

A script is a list of steps; step *i* answers the model call that sees *i* earlier assistant
messages, so a resumed or retried run gets the same answer. A step is a string (the final
answer), a dict `{"text": ..., "tool_calls": [{"name": ..., "args": {...}}]}`, or a function of
the transcript returning either. Text may contain `{last_tool_result}`, or `{tool_results}`
(every result of the last turn, one a line). When the caller streams
(`ModelRequest.on_delta`), the reply is also sent in chunks of `CHUNK_CHARS`, with a pause of
the step's `stream_delay_ms` after each.

```yaml
# mock_script.yaml beside agent.yaml, used by `model: mock/scripted`
- tool_calls: [{name: lookup_order, args: {order_id: "A-1001"}}]
- "Your order {last_tool_result}"
```
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toren.agent._problems import describe
from toren.errors import ConfigError
from toren.worker.models._base import Message, ModelReply, ModelRequest

__all__ = ["EchoModel", "ScriptCall", "ScriptStep", "ScriptedModel"]

Step = str | dict[str, Any] | Callable[[list[Message]], "str | dict[str, Any]"]


class ScriptCall(BaseModel):
    """A tool call in a script step."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The tool to call."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its arguments."""
    arguments: str | None = None
    """Its arguments as raw JSON text, sent as written (malformed ones too); wins over `args`."""
    id: str | None = None
    """The tool-use id; default `call_<step>_<n>`."""


class ScriptStep(BaseModel):
    """A step written as a mapping (a plain string is the final answer)."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    """The reply's text; `{last_tool_result}` is replaced by the last tool result,
    `{tool_results}` by every result of the last turn (one a line)."""
    tool_calls: list[ScriptCall] = Field(default_factory=list)
    """Tool calls the reply makes."""
    stream_delay_ms: float = Field(0, ge=0)
    """When the caller streams (`on_delta`): a pause after each chunk, to watch it arrive."""


class EchoModel:
    """Answers with the last user message, prefixed by `echo: `."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Echo the last user message."""
        last = next((m for m in reversed(request.messages) if m.get("role") == "user"), None)
        text = str(last.get("content", "")) if last else ""
        return ModelReply(content=f"echo: {text}", usage=_usage(request, text), model="echo")


class ScriptedModel:
    """Plays a script of steps; see the module docstring."""

    def __init__(self, steps: Sequence[Step], name: str = "scripted") -> None:
        self.steps = list(steps)
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a script from a YAML list of steps.

        Raises:
            ConfigError: listing every malformed step, each naming the file, the step and the key.
        """
        path = Path(path)
        try:
            steps = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from None
        if not isinstance(steps, list):
            raise ConfigError(
                f"{path}: a mock script must be a YAML list of steps, got {type(steps).__name__}"
            )
        problems: list[str] = []
        for number, step in enumerate(steps, start=1):
            if isinstance(step, dict):
                try:
                    ScriptStep.model_validate(step)
                except ValidationError as err:
                    problems += describe(err, f"{path}: step {number}", ScriptStep)
            elif not isinstance(step, str):
                problems.append(
                    f"{path}: step {number}: must be the answer's text or a mapping of text: "
                    f"and tool_calls:, got {step!r}"
                )
        if problems:
            raise ConfigError(problems)
        return cls(steps, name=path.stem)

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Answer with the step for this point of the conversation."""
        # Turns toren added for queued tools are not the model's answers.
        index = sum(
            1 for m in request.messages if m.get("role") == "assistant" and not m.get("queued")
        )
        if index >= len(self.steps):
            return ModelReply(content="(the script has no more steps)", model=self.name)
        step = self.steps[index]
        if callable(step):
            step = step(request.messages)
        if isinstance(step, str):
            step = {"text": step}
        last = next((m for m in reversed(request.messages) if m.get("role") == "tool"), None)
        text = str(step.get("text", "")).replace(
            "{last_tool_result}", str(last.get("content", "")) if last else ""
        )
        if "{tool_results}" in text:  # every result of the last turn, one a line, in call order
            turn: list[str] = []
            for message in reversed(request.messages):
                if message.get("role") != "tool":
                    break
                turn.insert(0, str(message.get("content", "")))
            text = text.replace("{tool_results}", "\n".join(turn))
        calls = []
        for i, call in enumerate(step.get("tool_calls") or []):
            arguments = call.get("arguments")
            if arguments is None:
                arguments = json.dumps(call.get("args", {}))
            calls.append(
                {
                    "id": call.get("id") or f"call_{index + 1}_{i + 1}",
                    "name": call["name"],
                    "arguments": arguments,
                }
            )
        if request.on_delta is not None:
            await _stream(request.on_delta, text, calls, float(step.get("stream_delay_ms") or 0))
        return ModelReply(
            content=text, tool_calls=calls, usage=_usage(request, text), model=self.name
        )


CHUNK_CHARS = 8
"""Characters per simulated delta."""


async def _stream(
    on_delta: Callable[[dict[str, Any]], None],
    text: str,
    calls: list[dict[str, Any]],
    delay_ms: float,
) -> None:
    """Send `text` and the calls' arguments in chunks, as a streaming provider does."""

    async def pause() -> None:
        await asyncio.sleep(delay_ms / 1000)

    for at in range(0, len(text), CHUNK_CHARS):
        on_delta({"type": "text_delta", "text": text[at : at + CHUNK_CHARS]})
        await pause()
    for index, call in enumerate(calls):
        arguments = str(call["arguments"])
        on_delta(
            {"type": "tool_call_delta", "index": index, "id": call["id"], "name": call["name"],
             "arguments": ""}
        )  # fmt: skip
        for at in range(0, len(arguments), CHUNK_CHARS):
            on_delta(
                {"type": "tool_call_delta", "index": index, "id": None, "name": None,
                 "arguments": arguments[at : at + CHUNK_CHARS]}
            )  # fmt: skip
            await pause()


def _usage(request: ModelRequest, text: str) -> dict[str, int]:
    seen = sum(len(str(m.get("content", ""))) for m in request.messages) + len(request.system)
    return {"input_tokens": seen // 4 + 1, "output_tokens": len(text) // 4 + 1}
