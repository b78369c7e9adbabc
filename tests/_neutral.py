"""What a model call records in history, whatever the provider: toren's neutral types.

```python
for result in model_results(history):
    assert neutral_problems(result) == []
```

A provider test on the dev server checks its recorded replies with these: a provider's own
shapes may ride only under `provider_content[<provider>]` (`toren.worker.models._base`).
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.converter import default

__all__ = ["model_results", "neutral_problems"]

MESSAGE_KEYS = {"role", "content", "tool_calls", "provider_calls", "provider_content"}
CALL_KEYS = {"id", "name", "arguments"}
PROVIDER_CALL_KEYS = {"id", "name", "arguments", "provider", "result", "is_error"}
USAGE_KEYS = {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
RESULT_KEYS = {"message", "usage", "model", "finish_reason", "earlier_usage", "attempt", "live"}


def model_results(history: Any) -> list[dict[str, Any]]:
    """The recorded results of `toren.call_model` in `history`, decoded as plain JSON."""
    scheduled: set[int] = set()
    found: list[dict[str, Any]] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == "toren.call_model":
                scheduled.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if done.scheduled_event_id in scheduled:
                [value] = default().payload_converter.from_payloads(list(done.result.payloads))
                found.append(value)
    return found


def neutral_problems(result: dict[str, Any]) -> list[str]:
    """Everything in a recorded model call's result that is not toren's neutral shape."""
    problems = [f"result key {k!r}" for k in set(result) - RESULT_KEYS]
    message = result.get("message") or {}
    problems += [f"message key {k!r}" for k in set(message) - MESSAGE_KEYS]
    if message.get("role") != "assistant" or not isinstance(message.get("content"), str):
        problems.append(f"not an assistant message with text: {message!r:.200}")
    for call in message.get("tool_calls") or []:
        if set(call) != CALL_KEYS or not isinstance(call.get("arguments"), str):
            problems.append(f"tool call {call!r:.200}")
    for call in message.get("provider_calls") or []:
        if not set(call) <= PROVIDER_CALL_KEYS:
            problems.append(f"provider call {call!r:.200}")
    verbatim = message.get("provider_content")
    if verbatim is not None and (not isinstance(verbatim, dict) or len(verbatim) != 1):
        problems.append(f"provider_content must be one provider's: {verbatim!r:.200}")
    for usage in (result.get("usage") or {}, result.get("earlier_usage") or {}):
        problems += [f"usage key {k!r}" for k in set(usage) - USAGE_KEYS]
    if not isinstance(result.get("finish_reason", ""), str):
        problems.append(f"finish_reason {result.get('finish_reason')!r}")
    return problems
