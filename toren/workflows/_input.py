"""The run's own input, checked in its first workflow task: it comes from any client.

`AgentRun` takes its input as raw JSON, so a wrong one fails the run at once with a
non-retryable error that names the key and the fix, instead of a workflow task that fails
to decode its arguments and retries forever. Deterministic, workflow-side code.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from temporalio.converter import value_to_type

    from toren._types import RunInput, RunState
    from toren.workflows._approvals import json_type

__all__ = ["InvalidRunInput", "parse_run_input"]

_AGENT = re.compile(r"^[a-z][a-z0-9_]*$")
_KEYS = ("agent", "prompt", "arguments", "messages", "attachments", "carry")
_ROLES = ("user", "assistant", "tool", "system")
EXAMPLE = '{"agent": "support", "prompt": "Where is order A-1002?"}'


def InvalidRunInput(problem: str) -> ApplicationError:  # noqa: N802 - reads as an error type
    """The non-retryable failure of a run whose input is wrong."""
    return ApplicationError(
        f"invalid AgentRun input: {problem} (start it with a JSON object like {EXAMPLE})",
        type="InvalidRunInput",
        non_retryable=True,
    )


def parse_run_input(raw: Any) -> RunInput:
    """Check `raw` (the decoded JSON the run was started with) and build its `RunInput`.

    Raises:
        ApplicationError: `InvalidRunInput`, naming every wrong key at once.
    """
    if not isinstance(raw, dict):
        raise InvalidRunInput(f"expected a JSON object, got {json_type(raw)}")
    problems: list[str] = []
    for key in raw:
        if key not in _KEYS:
            problems.append(_unknown(str(key)))
    agent, prompt = raw.get("agent"), raw.get("prompt")
    for key, value in (("agent", agent), ("prompt", prompt)):
        if value is None and not any(_same(k, key) for k in raw if k != key):
            problems.append(f"missing key {key!r}")
        elif value is not None and not isinstance(value, str):
            problems.append(f"{key!r} must be a string, got {json_type(value)}")
    if isinstance(agent, str) and not _AGENT.match(agent):
        problems.append(f"'agent' {agent!r} is not an agent name ([a-z][a-z0-9_]*)")
    arguments = raw.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        problems.append(f"'arguments' must be a JSON object, got {json_type(arguments)}")
    messages = raw.get("messages")
    if messages is not None:
        problems += _message_problems(messages)
    attachments = raw.get("attachments")
    if attachments is not None and (
        not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments)
    ):
        problems.append(
            f"'attachments' must be a list of attachment ids (strings), got "
            f"{json_type(attachments)}"
        )
    carry: RunState | None = None
    if raw.get("carry") is not None:
        if not workflow.info().continued_run_id:
            problems.append(
                "'carry' is set by toren when a run continues as new; a new run may not "
                "bring one (remove it)"
            )
        else:
            try:
                carry = value_to_type(RunState, raw["carry"], [])
            except Exception as err:
                problems.append(f"'carry' is not a run's state: {err}")
    if problems:
        raise InvalidRunInput("; ".join(problems))
    return RunInput(
        agent=str(agent),
        prompt=str(prompt),
        arguments=arguments,
        messages=messages,
        attachments=attachments,
        carry=carry,
    )


def _message_problems(messages: Any) -> list[str]:
    if not isinstance(messages, list):
        return [f"'messages' must be a list of messages, got {json_type(messages)}"]
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return [f"'messages[{i}]' must be an object, got {json_type(message)}"]
        if message.get("role") not in _ROLES:
            return [f"'messages[{i}].role' must be one of {', '.join(_ROLES)}"]
        if "content" in message and not isinstance(message["content"], str | None):
            return [f"'messages[{i}].content' must be a string"]
    return []


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower() or bool(difflib.get_close_matches(a, [b], n=1, cutoff=0.75))


def _unknown(key: str) -> str:
    close = [k for k in _KEYS if k == key.lower()] or difflib.get_close_matches(key, _KEYS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (keys: {', '.join(_KEYS[:5])})"
    return f"unknown key {key!r}{hint}"
