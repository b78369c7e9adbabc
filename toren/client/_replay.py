"""Replaying histories against this code, as a worker replays a run at its next workflow task.

```python
from toren.client import replay

for check in await replay([history], client.data_converter):
    print(check.workflow_id, "ok" if check.ok else check.error)
```

`toren replay` (histories by id or from files) and `deploy_check` (an agent's workflows found
through visibility) both replay here, through the team's converter: payloads an offloading store
holds are read first and every payload must be readable (the team's codec), or nothing replays.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.runtime import Runtime, TelemetryConfig

from toren.client._events import read_through
from toren.client._readable import check_readable

__all__ = ["ReplayCheck", "replay"]

_CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}

_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
"""The failure's own message inside the core SDK's `Failure { ... }` text."""


@dataclass
class ReplayCheck:
    """One workflow's history replayed against this code."""

    workflow_id: str
    """The run's or thread's workflow id."""
    run_id: str
    """The run of its continue-as-new chain that was replayed."""
    workflow_type: str
    """`AgentRun` or `AgentThread`."""
    running: bool
    """Whether the history was still open (no close event) when it was read."""
    events: int
    """How many events it has."""
    error: str | None = None
    """Why it does not replay (the replayer's words, often a nondeterminism error); None: ok."""

    @property
    def ok(self) -> bool:
        """Whether it replays: a worker with this code goes on with it where it stands."""
        return self.error is None

    @property
    def kind(self) -> str:
        """`run` or `thread`."""
        return "thread" if self.workflow_type == "AgentThread" else "run"

    @property
    def status(self) -> str:
        """`running` or `closed`."""
        return "running" if self.running else "closed"


async def replay(
    histories: Sequence[WorkflowHistory], team: DataConverter | None = None
) -> list[ReplayCheck]:
    """Replay `histories` against this code's `AgentRun` and `AgentThread`, in order.

    Args:
        histories: whole histories of runs (one run of a chain each), fetched or from JSON.
        team: the team's data converter (its codec); toren's converter is added to it.

    Raises:
        UndecodablePayloadError: a payload is encoded by a codec `team` lacks (naming the fix).
        CodecServerError: the team's codec server did not answer.
    """
    # Imported here: the workflow and the sandbox runner load only for a replay.
    from temporalio.worker import Replayer

    from toren.connect._plugin import TorenPlugin, workflow_runner
    from toren.workflows import AgentRun, AgentThread

    converter = TorenPlugin().converter(team)
    for history in histories:
        # A copy: `read_through` decodes in place, and the replayer decodes again (a codec that
        # refuses what it did not encode would fail every replay).
        events = [_copy(e) for e in history.events]
        await read_through(events, converter)
        check_readable(converter, events)
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=converter,
        runtime=_quiet_runtime(),
    )
    # A run whose first workflow task is not scheduled yet (a thread that just continued as
    # new waits out a backoff first) holds nothing its code made, and the replayer would wait
    # on it forever: it replays, trivially.
    recorded = [h for h in histories if len(h.events) > 1]
    async with replayer.workflow_replay_iterator(_each(recorded)) as results:
        outcomes = [result.replay_failure async for result in results]  # in order
    failures = {id(history): failure for history, failure in zip(recorded, outcomes, strict=True)}
    checks: list[ReplayCheck] = []
    for history in histories:
        started = history.events[0].workflow_execution_started_event_attributes
        failure = failures.get(id(history))
        checks.append(
            ReplayCheck(
                workflow_id=history.workflow_id,
                run_id=history.run_id,
                workflow_type=started.workflow_type.name,
                running=history.events[-1].event_type not in _CLOSED,
                events=len(history.events),
                error=None if failure is None else _words(failure),
            )
        )
    return checks


@functools.cache
def _quiet_runtime() -> Runtime:
    """A runtime whose core logs nothing: it would write each failed replay to stdout again.

    The failure is in the `ReplayCheck`, and stdout may be `toren deploy check --json`'s.
    """
    return Runtime(telemetry=TelemetryConfig(logging=None))


def _words(failure: Exception) -> str:
    """What the replayer said, without the core SDK's debug dump around it."""
    text = str(failure) or type(failure).__name__
    # "Workflow activation completion failed: Failure { failure: Some(Failure { message: "...
    quoted = _CORE_MESSAGE.search(text)
    return quoted.group(1).replace('\\"', '"') if quoted else text


async def _each(histories: Sequence[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history


def _copy(event: HistoryEvent) -> HistoryEvent:
    copied = HistoryEvent()
    copied.CopyFrom(event)
    return copied
