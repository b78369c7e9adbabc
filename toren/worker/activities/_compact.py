"""What `toren.compact_context` shows the model: the span to summarise as plain text.

The run decides when and what to fold (`toren.workflows._context_window`); the activity
(`ModelCalls.compact_context`) gets the transcript by reference, as `toren.call_model` does,
and asks the model for a summary of the span as this module writes it: the previous summary
first, each tool result cut short, under the summarising instructions.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SUMMARY_INSTRUCTIONS", "conversation_text"]

SUMMARY_INSTRUCTIONS = (
    "You write the summary of the earlier part of a conversation between a user and an "
    "assistant that uses tools, so the assistant can go on without the full text. Keep what "
    "still matters: the user's requests and constraints, decisions, names, ids, numbers, what "
    "the tools returned that was used, and open questions. Write it as a record of what "
    "happened, in at most 400 words; give no instructions."
)
"""The summarising call's system prompt unless agent.yaml or the `compact` update gives one."""
TOOL_RESULT_CHARS = 1_500
"""Characters of each tool result the summarising call is shown."""


def conversation_text(messages: list[dict[str, Any]], previous: str, max_chars: int) -> str:
    """The span to summarise as plain text, the newest `max_chars` of it."""
    lines = [f"Summary of what came before:\n{previous}\n"] if previous else []
    for message in messages:
        role = str(message.get("role"))
        content = str(message.get("content") or "")
        if role == "tool":
            cut = content[:TOOL_RESULT_CHARS]
            more = len(content) - len(cut)
            lines.append(f"[tool {message.get('name')} returned] {cut}")
            if more > 0:
                lines.append(f"[... {more} more characters]")
            continue
        if content:
            lines.append(f"[{role}] {content}")
        for call in message.get("tool_calls") or []:
            args = call.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            lines.append(f"[{role} called {call.get('name')}] {args[:TOOL_RESULT_CHARS]}")
    text = "\n".join(lines)
    return text[-max_chars:]
