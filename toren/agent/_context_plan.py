"""A compaction plan: what the model is shown of a transcript that stays whole.

The workflow records a plan (pure data) and passes it with the transcript reference to
`toren.call_model`, which renders the model's view with `view`:

```python
plan = {"fold_end": 40, "summary": "The user asked ...", "elided": [44, 47]}
view(messages, plan)
# [{"role": "user", "content": "Summary of the earlier conversation: ..."}, *messages[40:]]
# with the tool results at 44 and 47 replaced by a short note
```

The transcript and its digest never change; `messages`, `toren chat` and the HTTP API still
read every message. Deterministic: the workflow imports this module to measure its plans.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from toren.agent._converter import omit_defaults

__all__ = [
    "COMPACT_ACTIVITY",
    "ELIDED_NOTE",
    "SUMMARY_MAX_TOKENS",
    "SUMMARY_PREFIX",
    "CompactInput",
    "is_length_refusal",
    "message_chars",
    "refused_window",
    "view",
]

Message = dict[str, Any]

COMPACT_ACTIVITY = "toren.compact_context"
"""The activity in which the model summarises the older turns."""
SUMMARY_MAX_TOKENS = 1_024
"""The longest summary: the plan carries it into every model call's input."""

SUMMARY_PREFIX = (
    "Summary of the earlier conversation (written to save space; it tells what happened "
    "before, it gives no instructions):\n\n"
)
ELIDED_NOTE = (
    "(toren: this tool result of {chars} characters was elided to keep the conversation "
    "within the model's context window)"
)

_REFUSAL_WORDS = (
    "maximum context length",
    "prompt is too long",
    "context_length_exceeded",
    "exceeds the context window",
)
"""How OpenAI, Anthropic, vLLM and llama.cpp say a prompt was too long for the model."""
_WINDOW_IN_REFUSAL = (
    re.compile(r"maximum context length is (\d+)"),  # OpenAI, vLLM
    re.compile(r"tokens > (\d+) maximum"),  # Anthropic
    re.compile(r"context (?:window|size)\D{0,30}(\d{3,})"),  # llama.cpp
)


def message_chars(message: Message) -> int:
    """A message's size as the workflow measures it (characters of its JSON)."""
    return len(json.dumps(message, ensure_ascii=False))


def view(messages: list[Message], plan: dict[str, Any] | None) -> list[Message]:
    """What the model is shown of `messages` (the whole transcript) under `plan`."""
    if not plan:
        return messages
    fold = int(plan.get("fold_end") or 0)
    elided = set(plan.get("elided") or ())
    shown: list[Message] = []
    if plan.get("summary"):
        shown.append({"role": "user", "content": SUMMARY_PREFIX + str(plan["summary"])})
    for index in range(fold, len(messages)):
        message = messages[index]
        if index in elided and message.get("role") == "tool":
            chars = len(str(message.get("content") or ""))
            message = {**message, "content": ELIDED_NOTE.format(chars=chars)}
        shown.append(message)
    return shown


def is_length_refusal(kind: str | None, text: str) -> bool:
    """Whether a failed model call's failure (`kind`: its type) says the prompt was too long."""
    lowered = text.lower()
    return kind == "PromptTooLongError" or any(w in lowered for w in _REFUSAL_WORDS)


def refused_window(text: str) -> int | None:
    """The window (tokens) a length refusal names, when it names one."""
    for pattern in _WINDOW_IN_REFUSAL:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


@omit_defaults
@dataclass
class CompactInput:
    """The input of `toren.compact_context`: which span of the transcript to summarise.

    The transcript comes by reference, as `ModelCallInput`'s does (`toren.agent._transcript`).
    """

    agent: str
    model: str
    count: int
    digest: str
    since: int
    tail: list[dict[str, Any]]
    start: int
    """First message folded (the previous plan's `fold_end`)."""
    end: int
    """First message kept."""
    step: int = 0
    previous_summary: str = ""
    """The summary of the messages before `start`, folded into the new one."""
    instructions: str | None = None
    """The summarising call's system prompt (agent.yaml, or the `compact` update's)."""
    max_chars: int = 400_000
    """Most characters of conversation the summarising call is shown (the newest kept)."""
    run_key: str = ""
