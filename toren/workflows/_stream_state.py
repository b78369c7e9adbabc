"""The live stream's state across continue-as-new (`RunState.stream`), workflow-side.

The next run's `__init__` builds its `WorkflowStream` from the state its raw input carries, so
the stream's offsets go on where the previous run's stopped and a subscriber follows the chain.
Only the newest items travel (`CARRY_BYTES`): the carried input stays small however long the
run; a subscriber asking for an older offset gets the kept items, after a `truncated` notice.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.workflow_streams import WorkflowStreamState
    from temporalio.converter import value_to_type

__all__ = ["CARRY_BYTES", "carried_stream", "stream_state_json"]

CARRY_BYTES = 256_000
"""Stream items carried across continue-as-new (the newest, up to this many encoded bytes)."""


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
