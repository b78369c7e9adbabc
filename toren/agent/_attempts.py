"""Every failed attempt of a model call, kept where `toren events` can read it.

Temporal records a retried activity once, when it ends: its `ActivityTaskStarted` event holds
the final attempt's number and the failure before it (`last_failure`), and nothing of the
attempts in between. So each failing attempt of `toren.call_model` carries the failures of the
attempts before it: it reads them from its heartbeat details (the server keeps those from one
attempt to the next), adds its own, heartbeats the list (so the next attempt gets it), and
fails with the list as its failure's details. The failure before the last one thus holds them
all, and so does the failure that ends the call:

```python
failed = with_failure(carried(activity.info().heartbeat_details), attempt, 500, "…")
activity.heartbeat(failed)
raise ApplicationError("…", failed)

attempts_before(started_event_attributes, decode)   # the renderer: [{"attempt": 1, …}, …]
```

A record is `{"attempt": n, "status": 500 | None, "error": "…", "at": "…Z"}`; the error is
redacted by the activity before it is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "KEPT",
    "attempts_before",
    "carried",
    "failure_record",
    "usage_of",
    "with_failure",
    "with_usage",
]

KEPT = 20
"""Failed attempts kept per model call (the latest), so the record stays small."""

Decode = Callable[[Any], list[Any]]
"""Decodes a `Payloads` message into its values."""


def carried(details: Sequence[Any]) -> list[dict[str, Any]]:
    """The failed attempts recorded in heartbeat or failure `details` (empty when none)."""
    records = details[0] if details else None
    if not isinstance(records, list):
        return []
    return [r for r in records if isinstance(r, dict) and "attempt" in r]


def with_failure(
    earlier: list[dict[str, Any]], attempt: int, status: int | None, error: str
) -> list[dict[str, Any]]:
    """`earlier` and this attempt's failure, the latest `KEPT` of them."""
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    record = {"attempt": attempt, "status": status, "error": error, "at": at}
    return [*earlier, record][-KEPT:]


def with_usage(
    earlier: list[dict[str, Any]], attempt: int, usage: dict[str, int]
) -> list[dict[str, Any]]:
    """`earlier` and the usage this attempt's provider reported (billed even if it then dies)."""
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return [*earlier, {"attempt": attempt, "usage": dict(usage), "at": at}][-KEPT:]


def usage_of(records: list[dict[str, Any]]) -> dict[str, int]:
    """The summed usage the attempts in `records` reported (a usage record has no error)."""
    total: dict[str, int] = {}
    for record in records:
        for key, value in (record.get("usage") or {}).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def attempts_before(started: Any, decode: Decode) -> list[dict[str, Any]]:
    """The failed attempts before the one an `ActivityTaskStarted` event records.

    From toren's records in the last failure's details (or, when the worker died, in the
    heartbeat details its timeout kept); otherwise, as in a history from before toren kept
    them, the last failure alone.
    """
    if started.attempt <= 1 or not started.HasField("last_failure"):
        return []
    failure = started.last_failure
    records = failure_record(failure, decode)
    if records:
        return records
    info = failure.timeout_failure_info if failure.HasField("timeout_failure_info") else None
    earlier = _failures(carried(decode(info.last_heartbeat_details))) if info else []
    lost = {"attempt": started.attempt - 1, "status": None, "error": _text(failure)}
    return [*[r for r in earlier if r["attempt"] < lost["attempt"]], lost]


def failure_record(failure: Any, decode: Decode) -> list[dict[str, Any]]:
    """The failed attempts an `ApplicationError` of `toren.call_model` carries (up to its own)."""
    if not failure.HasField("application_failure_info"):
        return []
    return _failures(carried(decode(failure.application_failure_info.details)))


def _failures(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "error" in r]


def _text(failure: Any) -> str:
    text: str = failure.message
    if failure.HasField("timeout_failure_info"):
        text = text or "activity timed out"
    return text
