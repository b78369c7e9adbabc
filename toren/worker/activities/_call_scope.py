"""What every call activity runs inside: heartbeats, its live stream, its span's failure.

```python
with span as call, failed_in(call, redactor):
    async with heartbeating(), live or contextlib.nullcontext():
        ...
```

Shared by the model call (`_model_call`) and the tool calls (`_tool_activities`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

from temporalio import activity

from toren.worker._live import ActivityStream
from toren.worker._loaded import LoadedAgent
from toren.worker._redact import Redactor
from toren.worker._telemetry import CallSpan

__all__ = ["HEARTBEAT_EVERY", "announce_retry", "failed_in", "heartbeating", "live_stream"]

HEARTBEAT_EVERY = 2.0
"""Seconds between heartbeats of a running call (agent.yaml `heartbeatTimeoutS`, 10 s unless
set, is at least 10 s or off; Temporal's SDK sends at most one beat per 0.8 of it)."""


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[list[Any]]:
    """Heartbeat in the background, so a dead worker is noticed and cancellation arrives.

    Each beat carries the details this attempt started with, so what an earlier attempt left
    there (a model call's failed attempts, `toren.agent._attempts`) outlives a worker that dies.
    """
    details = list(activity.info().heartbeat_details)
    if activity.info().is_local:
        # Local activities cannot heartbeat (the SDK core logs a warning for each attempt).
        yield details
        return

    async def beat() -> None:
        while True:
            # Beat after the first interval, not at once: each beat is a server RPC, most calls
            # end sooner, and a heartbeat timeout (at least 10 s) leaves room for the first one.
            await asyncio.sleep(HEARTBEAT_EVERY)
            activity.heartbeat(*details)

    task = asyncio.create_task(beat())
    try:
        yield details  # the caller may replace what later beats carry
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.contextmanager
def failed_in(call: CallSpan, redactor: Redactor) -> Iterator[None]:
    """Mark `call`'s span failed, with a redacted message, when the attempt raises."""
    try:
        yield
    except BaseException as err:
        call.failed(f"{type(err).__name__}: {err}", redactor)
        raise


def live_stream(
    loaded: LoadedAgent,
    step: int,
    redactor: Redactor,
    call_id: str | None = None,
    tail_in_result: bool = False,
) -> ActivityStream | None:
    """The run's live stream for this activity, or `None` (agent.yaml `stream: false`)."""
    config = loaded.agent.config.stream
    if not config.enabled or activity.info().is_local:
        return None
    progress = {
        str(t.name): t.progress_argument for t in loaded.agent.tools.values() if t.progress_argument
    }
    return ActivityStream(
        step=step,
        redactor=redactor,
        batch_ms=config.batch_ms,
        call_id=call_id,
        progress_arguments=progress,
        tail_in_result=tail_in_result,
    )


def announce_retry(live: ActivityStream, earlier: list[dict[str, Any]]) -> None:
    """As a retry starts: what the earlier attempts published is superseded, and why."""
    info = activity.info()
    for attempt in range(1, info.attempt):
        live.publish({**live.base("superseded"), "attempt": attempt})
    if info.attempt <= 1 or live.call_id is not None:
        return
    last = earlier[-1] if earlier else {}
    delay = None
    if last.get("at"):
        with contextlib.suppress(ValueError):
            failed_at = datetime.fromisoformat(str(last["at"]).replace("Z", "+00:00"))
            delay = round((info.current_attempt_scheduled_time - failed_at).total_seconds(), 3)
    policy = info.retry_policy
    live.publish(
        {
            **live.base("model_retry"),
            "max_attempts": policy.maximum_attempts if policy else None,
            "reason": str(last.get("error") or "the worker running it stopped"),
            "status": last.get("status"),
            "delay_s": delay,
        }
    )
