"""Reading a run's live stream: `toren.client.stream`.

```python
live = toren_client.stream(client, run_id)
async for event in live:
    if event.type == "text_delta":
        print(event.data["text"], end="", flush=True)
    elif event.type == "superseded":
        ...  # a retry: the text of that attempt is gone from `live.text`
print(live.text)   # the model's text of the latest step, retried attempts left out
```

The iterator follows continue-as-new, drops what a `superseded` item retracts (and anything
that attempt publishes afterwards), starts again on each `message_received` of a thread, and
ends after `run_completed`, `run_failed` or `thread_closed` (or when the workflow closes).
Offsets are the stream's: resume with `from_offset=event.offset + 1`. Asking for an offset
the run no longer keeps yields a `truncated` event, then the items it still has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from toren.agent._types import STREAM_TOPIC
from toren.client._stream_feed import read

__all__ = ["END_TYPES", "LiveStream", "StreamEvent", "stream"]

END_TYPES = ("run_completed", "run_failed", "thread_closed")
"""Item types after which the iterator ends."""


@dataclass
class StreamEvent:
    """One item of a run's live stream, at its `offset`."""

    offset: int
    """The item's place in the stream (resume with `from_offset=offset + 1`)."""
    type: str
    """`text_delta`, `tool_progress`, `run_completed`, ... (`toren.worker._live`) or `truncated`."""
    data: dict[str, Any] = field(default_factory=dict)
    """The item as published: `type`, `run_id`, `step`, and the type's own keys."""

    @property
    def step(self) -> int | None:
        """The model turn the item belongs to."""
        step = self.data.get("step")
        return step if isinstance(step, int) else None


class LiveStream:
    """An async iterator of `StreamEvent`s that keeps the model's text as it streams."""

    def __init__(
        self,
        client: Client,
        run_id: str,
        from_offset: int = 0,
        poll_cooldown: timedelta = timedelta(milliseconds=100),
    ) -> None:
        self.run_id = run_id
        self._client = client
        self._from = from_offset
        self._cooldown = poll_cooldown
        self.texts: dict[tuple[int, int], str] = {}
        """Model text by (step, attempt), superseded attempts removed."""
        self._retracted: set[tuple[int, str | None, int]] = set()
        self._latest: tuple[int, int] | None = None

    @property
    def text(self) -> str:
        """The model's text of the latest step, as far as it streamed."""
        return self.texts.get(self._latest, "") if self._latest else ""

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[StreamEvent]:
        # By query, sharing one loop with this process's other readers of the run: no reader
        # holds an update on it, so none delays a decision or a message
        # (`toren.client._stream_feed`).
        expected = self._from
        async for item in read(
            self._client, self.run_id, self._from, topic=STREAM_TOPIC, active=self._cooldown
        ):
            if item.offset > expected:
                yield StreamEvent(
                    expected,
                    "truncated",
                    {"type": "truncated", "requested": expected, "first_kept": item.offset},
                )
            expected = item.offset + 1
            data = item.data if isinstance(item.data, dict) else {"type": "unknown"}
            event = StreamEvent(item.offset, str(data.get("type")), data)
            if self._apply(event):
                yield event
            if event.type in END_TYPES:
                return

    def _apply(self, event: StreamEvent) -> bool:
        """Keep the text up to date; `False` for an item of a retracted attempt."""
        data = event.data
        step, attempt = event.step or 0, data.get("attempt")
        # What a tool attempt published is keyed by its call; what a model attempt did, not.
        call = data.get("call_id") if event.type in ("tool_progress", "superseded") else None
        key = (step, call, attempt if isinstance(attempt, int) else 0)
        if event.type == "message_received":
            self.texts.clear()
            self._retracted.clear()
            self._latest = None
        elif event.type == "superseded":
            self._retracted.add(key)
            self.texts.pop((step, key[2]), None)
        elif key in self._retracted:
            return False
        elif event.type == "text_delta":
            self.texts[(step, key[2])] = self.texts.get((step, key[2]), "") + str(data["text"])
            self._latest = (step, key[2])
        elif event.type == "tool_call_delta" and (step, key[2]) != self._latest:
            self._latest = (step, key[2])
        return True


def stream(
    client: Client,
    run_id: str,
    from_offset: int = 0,
    *,
    poll_cooldown: timedelta = timedelta(milliseconds=100),
) -> LiveStream:
    """Follow the live stream of run (or thread) `run_id` from `from_offset`; see the module."""
    return LiveStream(client, run_id, from_offset, poll_cooldown)
