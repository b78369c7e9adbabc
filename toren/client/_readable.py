"""Whether this client can read a run's payloads: the check before toren writes into a run.

A client without the team's codec that approves a call on an encrypted run would put the
approval into history in plaintext (the worker's codec passes unencoded payloads through), and
then fail to read the answer. So before it writes (a decision, a message, a close), a client
with no codec of its own looks at the run's first event once per client: payloads it cannot
read mean the namespace is encoded, and it says how to fix that instead of writing.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from toren.client._events import payloads_in, read_through
from toren.connect._codec import unknown_encoding
from toren.connect._team_converter import readable_encodings
from toren.errors import UndecodablePayloadError

__all__ = ["check_readable", "ensure_readable"]

_plain: weakref.WeakSet[Client] = weakref.WeakSet()
"""Clients with no codec that found a run whose payloads they read: the namespace is plain."""


def check_readable(converter: DataConverter, events: Iterable[HistoryEvent]) -> None:
    """Raise if a payload of `events` (already read through) is in an encoding nothing reads.

    Raises:
        UndecodablePayloadError: naming the codec settings that fix it.
    """
    known = readable_encodings(converter)
    for event in events:
        encoding = unknown_encoding(payloads_in(event), known)
        if encoding is not None:
            raise UndecodablePayloadError(encoding, configured=converter.payload_codec is not None)


async def ensure_readable(client: Client, run_id: str) -> None:
    """Raise when this client cannot read `run_id`: before it writes there unencoded, or follows it.

    Free for a client with a codec, and once per client otherwise (one event read).

    Raises:
        UndecodablePayloadError: the run's payloads are encoded and this client has no codec.
    """
    if client.data_converter.payload_codec is not None or client in _plain:
        return
    first: list[HistoryEvent] = []
    async for event in client.get_workflow_handle(run_id).fetch_history_events(page_size=1):
        first.append(event)
        break
    await read_through(first, client.data_converter)
    check_readable(client.data_converter, first)
    _plain.add(client)
