"""Payload limits: what a tool or a model may put into history, and how oversize is cut.

Temporal refuses a payload over 2 MB (and warns past 512 KB); a tool returning 5 MB would
otherwise fail its activity's completion on every retry. So before a result leaves its
activity, toren cuts it with a note the model can read; the full bytes belong in an
`Attachment` (stored by id, outside history). `TOREN_MAX_RESULT_BYTES` tunes the cut.

```python
text = cut_text(big, MAX_RESULT_BYTES, what="tool fetch_report's result")
```
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["MAX_CHANGES_BYTES", "MAX_RESULT_BYTES", "cut_message", "cut_text", "shown_to_model"]

MAX_RESULT_BYTES = int(os.environ.get("TOREN_MAX_RESULT_BYTES", 256 * 1024))
"""Largest tool result or model message text kept whole (UTF-8 bytes); default 256 KB."""
MAX_CHANGES_BYTES = 512 * 1024
"""Largest set of ctx changes (state writes, events, messages) one call may record."""


def cut_text(text: str, limit: int = MAX_RESULT_BYTES, what: str = "result") -> str:
    """`text` if it fits in `limit` UTF-8 bytes, else its head and tail with a note between."""
    size = len(text.encode())
    if size <= limit:
        return text
    keep = max(limit - 300, 0) // 2
    head = text.encode()[:keep].decode(errors="ignore")
    tail = text.encode()[-keep:].decode(errors="ignore") if keep else ""
    note = (
        f"\n\n[toren: {what} was {size:,} bytes; cut to its first and last {keep:,} bytes to "
        "stay under Temporal's payload limit. Return large data as an Attachment instead.]\n\n"
    )
    return head + note + tail


def shown_to_model(messages: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """`messages` as a prompt shows them: each tool result over `limit` bytes cut with a note.

    With a store a result may be kept whole up to 32 MiB; sent whole, it would go into every
    later prompt (8.4 M input tokens a call were seen). `limits.maxResultBytesShown` is the
    declared cap; the transcript and history are untouched.
    """
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            size = len(content.encode())
            if size > limit:
                keep = max(limit - 400, 0) // 2
                head = content.encode()[:keep].decode(errors="ignore")
                tail = content.encode()[-keep:].decode(errors="ignore") if keep else ""
                note = (
                    f"\n\n[toren: this result is {size:,} bytes; the model is shown its first "
                    f"and last {keep:,} bytes (limits.maxResultBytesShown: {limit}). The whole "
                    "result is kept in the run's history.]\n\n"
                )
                message = {**message, "content": head + note + tail}
        out.append(message)
    return out


def cut_message(message: dict[str, Any], limit: int = MAX_RESULT_BYTES) -> dict[str, Any]:
    """A model message that fits: long text cut with a note; oversize tool-call arguments cut.

    Cut arguments are no longer valid JSON, so the workflow answers that call with an
    `invalid arguments` error the model can act on, instead of running it on half its input.
    """
    if len(json.dumps(message).encode()) <= limit:
        return message
    out = dict(message)
    out["content"] = cut_text(str(message.get("content") or ""), limit // 2, "the model's text")
    calls = []
    for call in message.get("tool_calls") or []:
        args = call.get("arguments")
        if isinstance(args, str) and len(args.encode()) > limit // 4:
            call = {**call, "arguments": args[: limit // 8] + "…[cut by toren: too large]"}
        calls.append(call)
    if calls:
        out["tool_calls"] = calls
    return out
