"""Reading a workflow's live stream by query, one loop per workflow per process (`read`).

```python
async for item in read(client, run_id, from_offset=0):
    print(item.offset, item.data)  # the decoded item, as `WorkflowStreamClient.subscribe` gives
```

The SDK's subscriber holds a long-poll *update* on the workflow. Temporal lets a workflow have
10 updates in flight, and a decision (`decide`) or a thread message (`send_message`) is an
update too: ten readers locked the people out, a poll a reader abandoned stayed in flight until
the workflow next published, and each wake-up of each reader added about three history events.

So toren's readers (SSE clients of `toren serve`, `toren.client.stream`, `toren run`,
`toren chat`) never send an update. They read with the stream's own
`__temporal_workflow_stream_poll` *query*, which a worker answers from its cache: it adds no
history, takes no update slot and holds nothing on the server between two reads, so a reader
that goes away (or is killed) leaves nothing behind. And the readers of one workflow in one
process share one loop (a `_Feed`): however many SSE clients watch a run, `toren serve` asks
once per tick. A feed reads every `ACTIVE_S` while items come, backs off to `IDLE_S` while none
do, reads at once when a reader joins, and stops as its last reader leaves.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamItem
from temporalio.service import RPCError, RPCStatusCode

from toren.agent._types import STREAM_TOPIC
from toren.errors import CodecServerError

__all__ = ["ACTIVE_S", "IDLE_S", "POLL_QUERY", "read"]

POLL_QUERY = "__temporal_workflow_stream_poll"
"""The stream's query: the items from an offset, answered at once."""

ACTIVE_S = 0.1
"""Between two reads while items come (a model's deltas are batched every 200 ms)."""

IDLE_S = 0.5
"""The longest wait between two reads of a stream that publishes nothing (a parked run)."""

QUERY_TIMEOUT_S = 10.0
"""How long one read waits for a worker."""

DESCRIBE_EVERY_S = 2.0
"""How often an idle feed asks the server whether the workflow has closed."""

_FINAL = frozenset(
    {
        RPCStatusCode.NOT_FOUND,
        RPCStatusCode.INVALID_ARGUMENT,
        RPCStatusCode.PERMISSION_DENIED,
        RPCStatusCode.UNAUTHENTICATED,
        RPCStatusCode.UNIMPLEMENTED,
    }
)
"""Errors of a read that reading again will not mend; after any other (no worker answered in
time, the server away), an open workflow is read again, as a long poll would wait."""
_OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


class _Feed:
    """One workflow's items as this process read them, shared by its readers."""

    def __init__(self, client: Client, workflow_id: str, topic: str, start: int) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.topic = topic
        self.base = start
        """The lowest offset this feed covers (a reader asking below reads that part itself)."""
        self.end = start
        """The next offset to ask for."""
        self.items: list[tuple[int, Payload]] = []
        self.cursors: dict[int, int] = {}
        """Each reader's next offset: items below them all are dropped."""
        self.active_s = ACTIVE_S
        self.error: BaseException | None = None
        self.closed = False
        """The workflow closed and every item it kept has been read."""
        self._changed = asyncio.Event()
        self._kick = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    def kick(self) -> None:
        """Read now rather than after the idle wait (a reader joined)."""
        self._kick.set()

    async def changed(self) -> None:
        """Wait until new items arrive, the workflow closes or reading fails."""
        await self._changed.wait()

    def after(self, offset: int) -> list[tuple[int, Payload]]:
        """The items from `offset` on."""
        return self.items[bisect.bisect_left(self.items, offset, key=lambda i: i[0]) :]

    def trim(self) -> None:
        low = min(self.cursors.values(), default=self.end)
        if self.items and self.items[0][0] < low:
            self.items = self.after(low)
        self.base = max(self.base, min(low, self.end))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        wait = self.active_s
        described = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                result = await query(self.client, self.workflow_id, self.topic, self.end)
            except (RPCError, CodecServerError) as err:
                # A codec server that timed out or answered 5xx once is no reason to end every
                # stream of the run: read again while the workflow is open.
                final = isinstance(err, RPCError) and err.status in _FINAL
                if final or not await self._open():
                    self._fail(err)
                    return
                wait = IDLE_S
            except Exception as err:
                self._fail(err)
                return
            else:
                fresh = [(o, p) for o, p in result if o >= self.end]
                if not result and result.next_offset < self.end:
                    # The first reader started past the stream's end (`?from=999999`, an old
                    # Last-Event-ID): follow the workflow's own end, or every later reader of
                    # the run would wait on offsets that never come.
                    self.end = result.next_offset
                    self.base = min(self.base, self.end)
                    self._notify()
                self.end = max(self.end, result.next_offset)
                if fresh:
                    self.items.extend(fresh)
                    self._notify()
                if fresh or result.more_ready:
                    wait = self.active_s
                    if result.more_ready:
                        continue
                else:
                    # Idle: back off, and now and then ask whether the workflow is still open.
                    # Asked before the next read, so that read has everything it published.
                    if self.closed:
                        self._notify()
                        return
                    wait = min(IDLE_S, max(wait, self.active_s) * 1.5)
                    if loop.time() - described >= DESCRIBE_EVERY_S:
                        described = loop.time()
                        if not await self._open():
                            self.closed = True
                            continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), wait)
            if self._kick.is_set():
                self._kick.clear()
                wait = self.active_s

    async def _open(self) -> bool:
        try:
            description = await self.client.get_workflow_handle(self.workflow_id).describe()
        except RPCError:
            return True  # the server is away: keep trying, as a long poll would
        return description.status in _OPEN

    def _fail(self, err: BaseException) -> None:
        self.error = err
        self._notify()


class _Result(list[tuple[int, Payload]]):
    next_offset: int = 0
    more_ready: bool = False


async def query(client: Client, workflow_id: str, topic: str, offset: int) -> _Result:
    """One read of the stream's items on `topic` from `offset` (no history, no update slot)."""
    result: PollResult = await client.get_workflow_handle(workflow_id).query(
        POLL_QUERY,
        PollInput(topics=[topic], from_offset=offset),
        result_type=PollResult,
        rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S),
    )
    out = _Result()
    for item in result.items:
        payload = Payload()
        payload.ParseFromString(base64.b64decode(item.data))
        out.append((item.offset, payload))
    out.next_offset = result.next_offset
    out.more_ready = result.more_ready
    return out


_READER_IDS = itertools.count()
_FEEDS: dict[tuple[Client, asyncio.AbstractEventLoop, str, str], _Feed] = {}


def feed_count() -> int:
    """How many feeds this process runs (for tests and the benchmark)."""
    return len(_FEEDS)


async def read(
    client: Client,
    workflow_id: str,
    from_offset: int = 0,
    *,
    topic: str = STREAM_TOPIC,
    active: timedelta | None = None,
) -> AsyncIterator[WorkflowStreamItem[Any]]:
    """The items of `workflow_id`'s stream on `topic` from `from_offset`, as they come.

    Follows continue-as-new (a query goes to the workflow's newest run, whose stream goes on
    with the same offsets) and ends when the workflow has closed and every item it kept was
    given. An offset the workflow no longer keeps gives the items it still has (the caller sees
    the gap in their offsets).

    Raises:
        temporalio.client.WorkflowQueryFailedError: the workflow hosts no stream.
        temporalio.service.RPCError: the workflow does not exist, or no worker answered for
            a closed one.
    """
    key = (client, asyncio.get_running_loop(), workflow_id, topic)
    feed = _FEEDS.get(key)
    if feed is not None and feed.error is not None:
        feed = None  # it stopped on an error: a new reader gets a new try, not the old error
    if feed is None:
        feed = _FEEDS[key] = _Feed(client, workflow_id, topic, from_offset)
        feed.start()
    else:
        feed.kick()
    if active is not None:
        feed.active_s = min(feed.active_s, max(active.total_seconds(), 0.01))
    reader = next(_READER_IDS)
    pos = from_offset
    feed.cursors[reader] = pos
    converter = client.data_converter.payload_converter
    try:
        # Below what the feed covers (a late reader from an early offset): read that part
        # here. The feed drops nothing below this reader's cursor meanwhile.
        while pos < feed.base:
            try:
                part = await query(client, workflow_id, topic, pos)
            except (RPCError, CodecServerError) as err:
                if isinstance(err, RPCError) and err.status in _FINAL:
                    raise
                await asyncio.sleep(IDLE_S)  # as the feed does: read again
                continue
            below = [(o, p) for o, p in part if o < feed.base]
            for offset, payload in below:
                yield WorkflowStreamItem(topic, converter.from_payload(payload), offset)
                pos = feed.cursors[reader] = offset + 1
            if part.more_ready and below:
                continue
            if part.next_offset >= feed.base:
                pos = feed.cursors[reader] = max(pos, feed.base)
            else:
                # The feed starts past the workflow's end (a first reader asked beyond it):
                # wait for it to learn the end rather than jump past items still to come.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(feed.changed(), IDLE_S)
        while True:
            batch = feed.after(pos)
            if batch:
                for offset, payload in batch:
                    yield WorkflowStreamItem(topic, converter.from_payload(payload), offset)
                    pos = feed.cursors[reader] = offset + 1
                feed.trim()
                continue
            if feed.error is not None:
                raise feed.error
            if feed.closed:
                return
            await feed.changed()
    finally:
        del feed.cursors[reader]
        if not feed.cursors:
            # The last reader left: stop reading at once (a query holds nothing on the
            # server, so nothing is left behind).
            if _FEEDS.get(key) is feed:
                del _FEEDS[key]
            if feed.task is not None:
                feed.task.cancel()
        else:
            feed.trim()
