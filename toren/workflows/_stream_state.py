"""The live stream of a run, workflow-side: its items in memory, its state across continue-as-new.

The next run's `__init__` builds its `LiveStream` from the state its raw input carries
(`RunState.stream`), so the stream's offsets go on where the previous run's stopped and a
subscriber follows the chain. Only the newest items travel (`CARRY_BYTES`): the carried input
stays small however long the run; a subscriber asking for an older offset gets the kept items,
after a `truncated` notice.

Readers should read by the stream's query (toren's own do: `toren.client._stream_feed`). A reader
that long-polls with the stream's update (the SDK's `WorkflowStreamClient.subscribe`, or a toren
from before) holds one of the 10 updates Temporal lets a workflow have in flight, and decisions and
messages are updates too: the stream keeps at most `MAX_OPEN_POLLS` such polls open and refuses
more (a refused update leaves no history), so slots always stay free for people.
"""

from __future__ import annotations

import base64
from typing import Any, cast

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from toren.agent._sdk_private import WorkflowStream, stream_log

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.workflow_streams import (
        PollInput,
        PollResult,
        PublishInput,
        WorkflowStreamItem,
        WorkflowStreamState,
    )
    from temporalio.converter import value_to_type

__all__ = [
    "CARRY_BYTES",
    "MAX_OPEN_POLLS",
    "POLLS_FULL",
    "LiveStream",
    "carried_stream",
    "stream_state_json",
]

CARRY_BYTES = 256_000
"""Stream items carried across continue-as-new (the newest, up to this many encoded bytes)."""

MAX_OPEN_POLLS = 3
"""Long-poll updates the stream keeps open at once; Temporal allows 10 updates in flight per
workflow, and the rest are for decisions, messages, cancels and budget changes."""

POLLS_FULL = "StreamPollsFull"
"""The `ApplicationError` type of a long poll refused because `MAX_OPEN_POLLS` are open."""


def stream_state_json(state: WorkflowStreamState, limit: int = CARRY_BYTES) -> dict[str, Any]:
    """`state` as plain JSON for `RunState.stream`, keeping the newest items up to `limit` bytes.

    The dropped items are truncated: a subscriber asking for them gets the retained ones.
    """
    log_items = list(state.log)
    size = sum(len(i.data) for i in log_items)
    base = state.base_offset
    while log_items and size > limit:
        size -= len(log_items.pop(0).data)
        base += 1
    return {
        "log": [{"topic": i.topic, "data": i.data} for i in log_items],
        "base_offset": base,
        "publishers": {
            pid: {"sequence": p.sequence, "last_seen": p.last_seen.isoformat()}
            for pid, p in state.publishers.items()
        },
    }


def carried_stream(raw: Any, *path: str) -> WorkflowStreamState | None:
    """The stream state a continued run's raw input carries at `path`, or `None`.

    Read in the workflow's `__init__`, before the input is checked: anything unexpected is no
    state (the run's own check then fails a wrong input).
    """
    value = raw
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, dict) or "log" not in value:
        return None
    try:
        state: WorkflowStreamState = value_to_type(WorkflowStreamState, value)
        return state
    except Exception:
        return None


class _SerializedPayload:
    """A stream item's `Payload`, kept as its serialized bytes.

    A `Payload` built in Python owns a protobuf arena: ~1.5 KB of native memory for an item
    of 200 bytes, held by every run for every item it keeps (a parked run keeps three). The
    stream only ever serializes an item (to answer a poll, or to carry it on) and measures it,
    so the bytes are all it needs, and they are exactly what it would send.
    """

    __slots__ = ("_wire",)

    def __init__(self, wire: bytes) -> None:
        self._wire = wire

    def SerializeToString(self) -> bytes:
        """The payload, serialized."""
        return self._wire

    def ByteSize(self) -> int:
        """Its serialized size."""
        return len(self._wire)


class LiveStream(WorkflowStream):
    """A `WorkflowStream` that keeps its items serialized (`_SerializedPayload`).

    Polls, queries and `get_state` answer byte for byte as the SDK's stream does; only the
    in-memory form of its items differs. Construct it from `@workflow.init`, as the SDK's.
    """

    def __init__(self, prior_state: WorkflowStreamState | None = None) -> None:
        """Register the stream's handlers, going on from `prior_state` if given."""
        self._open_polls = 0
        super().__init__(prior_state)
        self._serialize_from(0)

    async def _on_poll(self, payload: PollInput) -> PollResult:
        self._open_polls += 1
        try:
            return await super()._on_poll(payload)
        finally:
            self._open_polls -= 1

    def _validate_poll(self, payload: PollInput) -> None:
        # A validator only reads (it does not run on replay): the count is the handlers'.
        super()._validate_poll(payload)
        if self._open_polls >= MAX_OPEN_POLLS:
            raise ApplicationError(
                f"{MAX_OPEN_POLLS} readers already long-poll this stream, and every update in "
                "flight delays decisions and messages: read it with the "
                "`__temporal_workflow_stream_poll` query instead, as toren's readers do",
                type=POLLS_FULL,
                non_retryable=True,
            )

    def _publish_to_topic(self, topic: str, value: Any) -> None:
        start = len(self._items())
        super()._publish_to_topic(topic, value)
        self._serialize_from(start)

    def _on_publish(self, payload: PublishInput) -> None:
        # Typed as the SDK's: the signal's argument is decoded by this annotation. Anyone can
        # send this signal; the SDK's handler raised on an item that is not a serialized
        # Payload, and a signal handler that raises fails the workflow task again and again.
        problem = _publish_problem(payload)
        if problem is not None:
            workflow.logger.warning("live stream: a publish signal was dropped: %s", problem)
            return
        start = len(self._items())
        super()._on_publish(payload)
        self._serialize_from(start)

    def _serialize_from(self, start: int) -> None:
        """Keep the items from index `start` on as their bytes."""
        for item in self._items()[start:]:
            if isinstance(item.data, Payload):
                item.data = _serialized(item.data)

    def _items(self) -> list[WorkflowStreamItem[Any]]:
        # The SDK's private log. Should a later SDK keep it elsewhere, its items merely stay
        # `Payload`s (tests/test_plugin.py checks they are kept as bytes).
        return stream_log(self) or []


def _publish_problem(payload: Any) -> str | None:
    """Why `payload` is no publish the stream can take, or None.

    Each item must be a serialized Payload with an encoding, as the SDK's publishers send:
    readers decode it by that.
    """
    if not isinstance(payload, PublishInput) or not isinstance(payload.items, list):
        return f"expected {{items, publisher_id, sequence}}, got {type(payload).__name__}"
    for entry in payload.items:
        item = Payload()
        try:
            item.ParseFromString(base64.b64decode(entry.data))
        except Exception as err:
            return f"an item is not a serialized Payload: {type(err).__name__}: {err}"
        if not isinstance(entry.topic, str) or not item.metadata.get("encoding"):
            return "an item has no topic or no encoding: a reader could not decode it"
    return None


def _serialized(payload: Payload) -> Payload:
    # Typed as the `Payload` the SDK's log holds: it calls only the two methods kept.
    return cast(Payload, _SerializedPayload(payload.SerializeToString()))
