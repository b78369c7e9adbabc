"""Live output of a run: the items toren publishes on its workflow stream, and who publishes them.

Each `AgentRun` and `AgentThread` hosts one `temporalio.contrib.workflow_streams` stream with one
topic, `"toren"`. Every item is a JSON object with `type`, `run_id` (the workflow id) and
`step`; items of one model or tool attempt carry `attempt`, items of one tool call `call_id`:

```text
type                 published by                       other keys
text_delta           model activity, as the model       attempt, text
                     writes
tool_call_delta      model activity                     attempt, index, id, name, arguments
                                                        (a fragment of the JSON text)
tool_call_started    model activity, once the tool's    call_id, name, progress (that
                     progress_argument is whole;        argument's value, or null);
                     else the workflow, as it takes     attempt when from the model
                     the call
tool_progress        tool activity, at each ctx.emit    call_id, attempt, name, event, data
approval_requested   workflow                           call_id, name, args, reason, expires_at
approval_decided     workflow                           call_id, name, approved, by, comment
tool_call_completed  workflow                           call_id, name, is_error
model_retry          model activity, as a retry         attempt, max_attempts, reason, status,
                     attempt starts                     delay_s (the wait before this attempt)
superseded           model or tool activity, as a       attempt (the earlier attempt, whose
                     retry attempt starts               items to drop); call_id for a tool
message_received     thread, as a message's             message_id, content
                     execution starts
message_completed    thread                             message_id, status, text or error
thread_closed        thread, as it ends                 closed_by
run_completed        AgentRun                           text, steps, tool_calls
run_failed           AgentRun                           error, kind
```

Deltas are batched (agent.yaml `stream: {batchMs: 200}`) and redacted with the agent's
redactor (text is held back by a secret's length, so a secret split across deltas is caught
whole). A model call signals each batch to the run while it writes; what it has not sent when
it returns (all of it, for a call quicker than `batchMs`) rides in its result
(`ModelCallResult.live`) and the run publishes it, before anything else of the turn: one
signal, and one workflow task, fewer per quick call. Nothing the run decides reads them, so
replay is the same with streams or without. `stream: false` publishes nothing from activities.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from toren.agent._context import current_stream
from toren.agent._types import STREAM_TOPIC
from toren.worker._redact import Redactor

__all__ = ["ActivityStream", "current_stream"]

log = logging.getLogger("toren")

MAX_TAIL_BYTES = 64 * 1024
"""A model call's unpublished tail rides in its result up to this size (it is in history
either way: in the result, or in the signal that would carry it); beyond, it is signalled."""

TAIL_OMITS = ("run_id", "step", "attempt")
"""What a tail's items leave out: the run puts back its id, the call's step and the attempt
that answered (`ModelCallResult.attempt`) as it publishes them. Items of older histories hold
them, and keep their own."""

Item = dict[str, Any]


class ActivityStream:
    """Publishes an activity's items to its run's stream, in batches, redacted.

    ```python
    async with ActivityStream(step=3, redact=redactor.text, batch_ms=200) as live:
        live.delta({"type": "text_delta", "text": "Hel"})   # sync: a provider's callback
        live.publish({"type": "tool_progress", ...})
    ```

    Publishing never fails the activity: a stream error is logged and the rest is dropped.
    """

    def __init__(
        self,
        *,
        step: int,
        redactor: Redactor,
        batch_ms: int = 200,
        call_id: str | None = None,
        progress_arguments: dict[str, str] | None = None,
        tail_in_result: bool = False,
    ) -> None:
        info = activity.info()
        self.run_id = info.workflow_id or ""
        self.attempt = info.attempt
        self.step = step
        self.call_id = call_id
        self._redactor = redactor
        self._hold = max(0, redactor.longest - 1)
        self._every = batch_ms / 1000
        self._pending: list[Item] = []
        self._open: Item | None = None
        """The delta being held: a `text_delta`, or one call's `tool_call_delta`."""
        self._field = "text"
        """Which of its keys `_text` fills (`text` or `arguments`)."""
        self._text = ""
        """Held text not yet published (a secret could still be completing)."""
        self._progress_arguments = progress_arguments or {}
        """Tool name → its `progress_argument`, for `tool_call_started` while arguments stream."""
        self._calls: dict[int, dict[str, Any]] = {}
        """Tool calls streaming, by index: id, name, arguments so far, started yet."""
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topic: Any = None
        self._task: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[None] | None = None
        """The flush a tick started: it runs to the end even when the ticks stop."""
        self._broken = False
        self._tail_in_result = tail_in_result
        self.tail: list[Item] = []
        """With `tail_in_result`, what was not yet published when the activity succeeded:
        its result carries these and the run publishes them, which saves a signal (and the
        workflow task it causes) per call. A failed attempt flushes as usual."""

    def base(self, type_: str) -> Item:
        """An item of this activity's attempt: `type`, `run_id`, `step`, `attempt`."""
        item: Item = {"type": type_, "run_id": self.run_id, "step": self.step}
        if self.call_id is not None:
            item["call_id"] = self.call_id
        item["attempt"] = self.attempt
        return item

    async def __aenter__(self) -> ActivityStream:
        # The client and the ticks start with the first item (`_start`): most tool calls
        # publish nothing, and should not pay for a stream they do not use.
        self._loop = asyncio.get_running_loop()
        return self

    def _start(self) -> None:
        """Connect to the run's stream and start flushing every `batch_ms` (once)."""
        if self._task is not None or self._loop is None:
            return
        self._connect()
        self._task = self._loop.create_task(self._ticks())

    def _connect(self) -> None:
        if self._client is not None or self._broken:
            return
        try:
            # Its own flusher stays idle (an hour): this class flushes on its own ticks.
            self._client = WorkflowStreamClient.from_within_activity(
                batch_interval=timedelta(hours=1), max_retry_duration=timedelta(seconds=30)
            )
            self._topic = self._client.topic(STREAM_TOPIC)
        except Exception as err:
            self._fail(err)

    async def __aexit__(self, exc_type: object, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._inflight is not None:
            # A batch on its way reaches the run before the activity's result (and its tail).
            await self._inflight
        if self._tail_in_result and exc_type is None:
            self._cut_text(final=True)
            tail = [_without(self._redactor.value(item), TAIL_OMITS) for item in self._pending]
            if self._broken or len(json.dumps(tail, default=str)) <= MAX_TAIL_BYTES:
                self._pending = []
                self.tail = [] if self._broken else tail
                return
        await self._flush(final=True)

    def delta(self, delta: Item) -> None:
        """Take a provider's delta (`ModelRequest.on_delta`); fragments coalesce per batch.

        Text and each call's arguments are held back by a secret's length, so a secret split
        across fragments is redacted whole.
        """
        self._start()
        if delta.get("type") == "text_delta":
            if self._open is None or self._open["type"] != "text_delta":
                self._cut_text(final=True)
                self._open, self._field = self.base("text_delta"), "text"
            self._text += str(delta.get("text") or "")
            return
        if delta.get("type") != "tool_call_delta":
            self.publish({**self.base(str(delta.get("type"))), **_without_type(delta)})
            return
        index = int(delta.get("index") or 0)
        same = (
            self._open is not None
            and self._open["type"] == "tool_call_delta"
            and self._open["index"] == index
        )
        if not same or delta.get("id") or delta.get("name"):
            self._cut_text(final=True)
            self._open = {
                **self.base("tool_call_delta"),
                "index": index,
                "id": delta.get("id"),
                "name": delta.get("name"),
            }
            self._field = "arguments"
        self._text += str(delta.get("arguments") or "")
        self._track_call(delta)

    def _track_call(self, delta: Item) -> None:
        call = self._calls.setdefault(
            int(delta.get("index") or 0), {"id": None, "name": None, "args": "", "started": False}
        )
        call["id"] = delta.get("id") or call["id"]
        call["name"] = delta.get("name") or call["name"]
        call["args"] += str(delta.get("arguments") or "")
        argument = self._progress_arguments.get(str(call["name"]))
        if argument is None or call["started"]:
            return
        found = _string_argument(call["args"], argument)
        if found is not None:
            self._started(call, found)

    def _started(self, call: dict[str, Any], progress: Any) -> None:
        call["started"] = True
        item = self.base("tool_call_started")
        item.update(call_id=call["id"], name=call["name"], progress=progress)
        self._pending.append(item)

    def calls_done(self) -> None:
        """The reply is whole: announce the calls whose progress argument never completed."""
        for call in self._calls.values():
            if call["name"] in self._progress_arguments and not call["started"]:
                try:
                    args = json.loads(call["args"] or "{}")
                except ValueError:
                    args = {}
                value = (
                    args.get(self._progress_arguments[call["name"]])
                    if isinstance(args, dict)
                    else None
                )
                self._started(call, value)

    def publish(self, item: Item) -> None:
        """Queue `item` (already holding `type`) for the next batch.

        Callable from any thread: a sync tool handler runs in one.
        """
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            here = False
        if not here and self._loop is not None:
            self._loop.call_soon_threadsafe(self.publish, item)
            return
        self._start()
        self._cut_text(final=True)
        self._pending.append(item)

    def _cut_text(self, final: bool) -> None:
        """Move the held text that can no longer be part of a secret into `_pending`."""
        if self._open is None:
            return
        text = self._text
        cut = len(text) if final else max(0, len(text) - self._hold)
        # Never cut inside a secret that is already whole: move the cut to where it starts.
        for start, end in self._redactor.spans(text):
            if start < cut < end:
                cut = start
        header = bool(self._open.get("id") or self._open.get("name"))
        if cut > 0 or header:
            self._text = text[cut:]
            self._pending.append({**self._open, self._field: self._redactor.text(text[:cut])})
            if header:
                self._open = {**self._open, "id": None, "name": None}
        if final:
            self._open, self._text = None, ""

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            # Shielded: stopping the ticks must not cut a signal half-sent.
            self._inflight = asyncio.ensure_future(self._flush())
            await asyncio.shield(self._inflight)

    async def _flush(self, final: bool = False) -> None:
        self._cut_text(final)
        items, self._pending = self._pending, []
        if items and self._topic is None:
            self._connect()
        if not items or self._broken or self._topic is None:
            return
        try:
            for item in items:
                self._topic.publish(self._redactor.value(item))
            await self._client.flush()
        except Exception as err:
            self._fail(err)

    def _fail(self, err: BaseException) -> None:
        if not self._broken:
            log.warning("live stream of %s: publishing stopped: %s", self.run_id, err)
        self._broken = True


def _string_argument(arguments: str, name: str) -> str | None:
    """The value of string argument `name` once its closing quote has streamed, else `None`."""
    match = re.search(rf'"{re.escape(name)}"\s*:\s*"((?:[^"\\]|\\.)*)"', arguments)
    if match is None:
        return None
    try:
        value: str = json.loads(f'"{match.group(1)}"')
    except ValueError:
        return None
    return value


def _without_type(delta: Item) -> Item:
    return {k: v for k, v in delta.items() if k != "type"}


def _without(item: Item, keys: tuple[str, ...]) -> Item:
    return {k: v for k, v in item.items() if k not in keys}
