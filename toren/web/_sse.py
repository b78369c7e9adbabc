"""A run's or thread's stream as Server-Sent Events, resumable by offset.

Each item the workflow published on its `WorkflowStream` topic `"toren"` becomes one event:

```
id: 7
data: {"type": "tool_call_started", "run_id": "...", "step": 2, ...}

```

The `id` is the item's offset in the stream, so a client that reconnects with
`Last-Event-ID: 7` (what `EventSource` sends by itself) gets offset 8 onwards: nothing missed,
nothing twice. `?from=N` starts at offset N. The response ends after the run's
`run_completed` or `run_failed` item (a thread's when the thread closes). Nothing is kept
here but the items not yet sent: the offsets are the workflow's own.

The clients of one run share one reader in this process, and it reads by query
(`toren.client._stream_feed`): however many clients watch, the run sees one reader per server
process, no update of theirs is in flight on it (approvals and messages are updates, 10 at most at
once), and a client that goes away holds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamItem
from temporalio.service import RPCError, RPCStatusCode

from toren.agent._types import STREAM_TOPIC
from toren.client._stream_feed import read
from toren.web._errors import WebError

__all__ = ["check_stream", "sse_events", "start_offset"]

FINAL = ("run_completed", "run_failed")
_OFFSET = {"Last-Event-ID": re.compile(r"[0-9]{1,18}"), "from": re.compile(r"[0-9]{1,9}")}
"""ASCII digits, as many as the OpenAPI allows each (`from` is an integer up to 999,999,999)."""
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""


def start_offset(from_param: str | None, last_event_id: str | None) -> int:
    """The first offset to send: after `Last-Event-ID` when not empty, else `?from=`, else 0.

    Raises:
        WebError: 400 when either is not a non-negative integer.
    """
    offsets: list[int] = []
    for name, value, after in (("Last-Event-ID", last_event_id, 1), ("from", from_param, 0)):
        # An empty Last-Event-ID is what an `EventSource` sends when no event had an id.
        if value is None or (value == "" and name == "Last-Event-ID"):
            continue
        # ASCII digits only: `str.isdigit` takes `²` (which `int` refuses) and `٣` (which it reads).
        # Both are checked, though `Last-Event-ID` wins: a bad `from` is refused either way.
        if not _OFFSET[name].fullmatch(value.strip(" \t")):
            raise WebError(400, f"{name} must be a non-negative integer offset", field=name)
        offsets.append(int(value) + after)
    return offsets[0] if offsets else 0


async def check_stream(client: Client, workflow_id: str) -> None:
    """Refuse, before any byte is sent, a workflow that hosts no stream or no worker answers.

    Raises:
        WebError: 409 when the workflow publishes no stream, 503 when no worker answers.
    """
    try:
        await client.get_workflow_handle(workflow_id).query(
            "__temporal_workflow_stream_offset", rpc_timeout=timedelta(seconds=10)
        )
    except WorkflowQueryFailedError as err:
        raise WebError(
            409, f"{workflow_id!r} publishes no stream (its worker predates streaming): {err}"
        ) from None
    except RPCError as err:
        if err.status == RPCStatusCode.DEADLINE_EXCEEDED:
            message = f"no worker answered for {workflow_id!r}; is one running?"
            raise WebError(503, message) from None
        raise


async def sse_events(
    client: Client, workflow_id: str, offset: int, *, thread: bool = False
) -> AsyncIterator[str]:
    """The SSE text of the stream from `offset`, ending after the run's final item.

    A thread's stream goes on past each execution's `run_completed` until the thread closes.
    """
    items = read(client, workflow_id, offset, topic=STREAM_TOPIC)
    yield "retry: 1000\n\n"
    next_item: asyncio.Task[WorkflowStreamItem[Any]] | None = None
    try:
        while True:
            if next_item is None:
                next_item = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({next_item}, timeout=KEEPALIVE_S)
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                item = next_item.result()
            except StopAsyncIteration:
                return
            next_item = None
            data = json.dumps(item.data, separators=(",", ":"))
            yield f"id: {item.offset}\ndata: {data}\n\n"
            if not thread and isinstance(item.data, dict) and item.data.get("type") in FINAL:
                return
    finally:
        # The client left (or the run ended): leave the shared reader now, so the last one
        # out stops it.
        if next_item is not None:
            next_item.cancel()
            with contextlib.suppress(BaseException):
                await next_item
        await items.aclose()  # type: ignore[attr-defined]
