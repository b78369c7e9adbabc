"""A run's event log with its child runs' own logs nested under the calls that started them.

An agent tool (agent.yaml `agents:`) or `run_process` starts a child run whose history is its
own (flat, as Temporal keeps it). `nested_events` reads each child's chain too and puts its
events right after the parent's `ProcessStarted`, each marked `depth` (1 for a child, 2 for a
grandchild) and `parentRun`; `toren events` prints them indented, `--flat` leaves them out.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from toren.client._history import events

__all__ = ["MAX_DEPTH", "nested_events"]

Event = dict[str, Any]

MAX_DEPTH = 4
"""Deepest child nesting read (a tree deeper than this is shown to this depth)."""


async def nested_events(client: Client, run_id: str, *, depth: int = 0) -> list[Event]:
    """`run_id`'s events, each child run's nested after the `ProcessStarted` that started it.

    A child whose history cannot be read (deleted by retention, a workflow that is not a toren
    run) is left out: its start and end stay in the parent's log.
    """
    log = await events(client, run_id)
    if depth >= MAX_DEPTH:
        return log
    nested: list[Event] = []
    for event in log:
        nested.append(event)
        child = event.get("runId") if event.get("type") == "ProcessStarted" else None
        if not child or event.get("workflow") != "AgentRun":
            continue
        try:
            inner = await nested_events(client, str(child), depth=depth + 1)
        except (RPCError, ValueError):
            continue
        nested += [
            {**e, "depth": e.get("depth", depth + 1), "parentRun": e.get("parentRun", run_id)}
            for e in inner
        ]
    return nested
