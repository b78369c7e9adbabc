"""Where a fork starts: a recorded run's conversation, state and workspace at one model call.

```python
point = await fork_point(client, chain, at_step=2)      # chain: `histories(client, run_id)`
point.messages      # the transcript the step-2 call saw (its first `count` messages)
point.state         # the run's key-value state then; point.workspace: its workspace version
```

Step N is the model call numbered N (`ModelCallInput.step`: counted across continue-as-new,
and from 1 in each execution of a thread). What that call saw is the transcript's first
`count` messages, read from the chain as workers read it (the `transcript_segment` query,
`toren.agent._transcript.assemble`) and checked against the call's recorded digest. The state
is rebuilt from the results history recorded before the call, applied in transcript order as
the run applied them; the workspace version is the last one recorded before it. `fork_run`
(`toren.client`) starts the fork from here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError, RPCStatusCode

from toren.agent._transcript import assemble, digest_of
from toren.client._events import read_through, render
from toren.client._readable import check_readable
from toren.client._render_run import MODEL_ACTIVITY
from toren.errors import UsageError

__all__ = [
    "ForkPoint",
    "copy_workspace",
    "fork_point",
    "no_such_run",
    "recorded_workspace",
    "first_value",
    "source_agent",
]

Message = dict[str, Any]

QUERY_TIMEOUT = timedelta(seconds=15)
"""How long a query of the source run waits for a worker to answer."""


@dataclass
class ForkPoint:
    """Everything a fork of `run_id` at `step` starts from (`RunInput.fork`, `messages`)."""

    run_id: str
    step: int
    execution: int | None
    agent: str
    task_queue: str
    """The source's task queue: its workers continue a fork that changes nothing."""
    messages: list[Message]
    state: dict[str, Any] = field(default_factory=dict)
    workspace: str | None = None
    arguments: dict[str, Any] | None = None
    attachments: list[str] | None = None
    user_id: str | None = None

    def fork(self) -> dict[str, Any]:
        """`RunInput.fork`: the origin, and the state and workspace to start from."""
        fork: dict[str, Any] = {"run_id": self.run_id, "step": self.step}
        if self.execution is not None:
            fork["execution"] = self.execution
        fork["state"] = self.state
        if self.workspace:
            fork["workspace"] = self.workspace
        return fork


@dataclass
class _Call:
    """The source's model call a fork starts at."""

    index: int
    """Its ActivityTaskScheduled event's position in the chain's events."""
    count: int
    digest: str


async def fork_point(
    client: Client, chain: list[WorkflowHistory], at_step: int, execution: int | None = None
) -> ForkPoint:
    """Where a fork of the run whose histories are `chain` (oldest first) at `at_step` starts.

    Raises:
        UsageError: the run is not an agent run or thread, the thread needs `execution` (or
            the run takes none), the step is past the run's end, or no worker answers the
            queries that read the transcript. Each says what to do.
    """
    run_id = chain[0].workflow_id
    events = [e for h in chain for e in h.events]
    await read_through(events, client.data_converter)
    check_readable(client.data_converter, events)
    converter = client.data_converter.payload_converter
    started = events[0].workflow_execution_started_event_attributes
    kind = started.workflow_type.name
    start = first_value(converter, started.input.payloads)
    start = start if isinstance(start, dict) else {}
    if kind == "AgentThread" and execution is None:
        raise UsageError(
            f"{run_id!r} is a thread: fork one of its executions (one per message), "
            "e.g. --execution 1 (toren.client.fork_run(..., execution=1))"
        )
    if kind == "AgentRun" and execution is not None:
        raise UsageError(f"{run_id!r} is a run, not a thread: it has no executions to choose from")
    if kind not in ("AgentRun", "AgentThread"):
        raise UsageError(f"{run_id!r} is a {kind} workflow, not a toren run or thread")
    call = _model_call(events, converter, at_step, execution, run_id)
    messages = await _transcript(client, chain, started.task_queue.name)
    if len(messages) < call.count or digest_of(messages[: call.count]) != call.digest:
        raise UsageError(
            f"the transcript of {run_id!r} read back ({len(messages)} messages) is not the one "
            f"its step {at_step} saw ({call.count} messages): it cannot be forked exactly"
        )
    messages = messages[: call.count]
    before = events[: call.index]
    point = ForkPoint(
        run_id=run_id,
        step=at_step,
        execution=execution,
        agent=str(start.get("agent") or ""),
        task_queue=started.task_queue.name,
        messages=messages,
        state=_state(before, converter, messages, start),
        workspace=_workspace(before, converter, start),
        arguments=start.get("arguments"),
        user_id=start.get("user_id"),
    )
    if kind == "AgentThread":
        received = [e for e in render(before, converter) if e["type"] == "MessageReceived"]
        if execution is not None and len(received) >= execution:
            point.attachments = received[execution - 1].get("attachments") or None
    else:
        point.attachments = start.get("attachments") or None
    return point


async def source_agent(client: Client, run_id: str) -> str:
    """The agent of run `run_id` (its latest run's start input names it).

    Raises:
        UsageError: there is no such run.
    """
    handle = client.get_workflow_handle(run_id)
    try:
        async for first in handle.fetch_history_events(page_size=1):
            start = first_value(
                client.data_converter.payload_converter,
                first.workflow_execution_started_event_attributes.input.payloads,
            )
            return str(start.get("agent") or "") if isinstance(start, dict) else ""
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_such_run(client, run_id) from None
        raise
    return ""


def no_such_run(client: Client, run_id: str) -> UsageError:
    """The error for a run id the namespace does not have."""
    return UsageError(
        f"no run {run_id!r} in namespace {client.namespace!r} (`toren events RUN` reads a "
        "run's steps)"
    )


def _model_call(
    events: list[HistoryEvent],
    converter: PayloadConverter,
    at_step: int,
    execution: int | None,
    run_id: str,
) -> _Call:
    """The first scheduling of model call `at_step` (of thread execution `execution`)."""
    current, last_count, last_step = 0, None, 0
    for index, event in enumerate(events):
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name != MODEL_ACTIVITY:
            continue
        body = first_value(converter, scheduled.input.payloads)
        if not isinstance(body, dict):
            continue
        step, count = int(body.get("step") or 0), int(body.get("count") or 0)
        # A thread's execution starts its steps at 1 over a longer transcript (a call asked
        # again after a refusal for length has the same step and count).
        if execution is not None and step == 1 and count != last_count:
            current += 1
        last_count = count
        if execution is not None and current != execution:
            continue
        last_step = max(last_step, step)
        if step == at_step:
            return _Call(index, count, str(body.get("digest") or ""))
    if execution is not None and current < execution:
        raise UsageError(
            f"thread {run_id!r} has {current} execution(s) with a model call; "
            f"--execution {execution} is past its end"
        )
    what = f"execution {execution} of thread" if execution is not None else "run"
    raise UsageError(
        f"{what} {run_id!r} made model calls 1 to {last_step}; step {at_step} is past its end"
        if last_step
        else f"{what} {run_id!r} made no model call yet: there is no step {at_step} to fork at"
    )


async def _transcript(client: Client, chain: list[WorkflowHistory], queue: str) -> list[Message]:
    """The chain's whole transcript, asked of its runs as a worker asks (`assemble`)."""
    from toren.store._transcripts import kept_transcript

    workflow_id, latest = chain[-1].workflow_id, chain[-1].run_id

    async def segment_of(prior: str | None, start: int) -> dict[str, Any]:
        handle = client.get_workflow_handle(workflow_id, run_id=prior or latest)
        segment: dict[str, Any] = await handle.query(
            "transcript_segment", start, rpc_timeout=QUERY_TIMEOUT
        )
        return segment

    async def kept(key: str) -> list[Message]:
        return await asyncio.to_thread(kept_transcript, key)

    try:
        return await assemble(segment_of, kept)
    except RPCError as err:
        raise UsageError(
            f"could not read the transcript of {workflow_id!r}: {err.message} (a fork reads "
            f"it by querying the run, which a worker serving task queue {queue!r} answers: "
            "start one, e.g. `toren worker AGENT_DIR`)"
        ) from None


def _state(
    before: list[HistoryEvent],
    converter: PayloadConverter,
    messages: list[Message],
    start: dict[str, Any],
) -> dict[str, Any]:
    """The run's key-value state as the model call after `before` found it.

    A turn's calls may finish in any order; the run applies their writes in call order, which
    is the order of their results in the transcript.
    """
    writes: dict[str, list[dict[str, Any]]] = {}
    call_id = None
    for event in render(before, converter):
        if event["type"] == "ToolCallCompleted":
            call_id = event.get("callId")
        elif event["type"] == "StateSet" and call_id is not None:
            writes.setdefault(str(call_id), []).append(dict(event.get("values") or {}))
    fork = start.get("fork")
    state = dict((fork.get("state") if isinstance(fork, dict) else None) or {})
    # The run's own input messages came from elsewhere: their results set nothing here.
    for message in messages[len(start.get("messages") or []) :]:
        if message.get("role") == "tool":
            found = writes.get(str(message.get("tool_call_id")))
            if found:
                state.update(found.pop(0))
    return state


def _workspace(
    before: list[HistoryEvent], converter: PayloadConverter, start: dict[str, Any]
) -> str | None:
    """The workspace version the last call before the fork's step left (a fork's: its own)."""
    for event in reversed(before):
        found = recorded_workspace(event, converter)
        if found:
            return found
    fork = start.get("fork")
    found = fork.get("workspace") if isinstance(fork, dict) else None
    return str(found) if found else None


def recorded_workspace(event: HistoryEvent, converter: PayloadConverter) -> str | None:
    """The workspace version a history event records: a call's result, or a continued run's."""
    if event.HasField("activity_task_completed_event_attributes"):
        payloads = event.activity_task_completed_event_attributes.result.payloads
    elif event.HasField("marker_recorded_event_attributes"):
        payloads = event.marker_recorded_event_attributes.details["data"].payloads
    elif event.HasField("workflow_execution_started_event_attributes"):
        payloads = event.workflow_execution_started_event_attributes.input.payloads
    else:
        return None
    for payload in payloads:
        try:
            value = converter.from_payloads([payload])[0]
        except Exception:
            continue
        if not isinstance(value, dict):
            continue
        found = value.get("workspace") or (value.get("carry") or {}).get("workspace")
        if isinstance(found, str) and found:
            return found
    return None


def copy_workspace(source: str, fork: str, version: str) -> None:
    """Make workspace version `version` of run `source` a version of run `fork` too.

    Versions are manifests stored per run over blobs stored by content, so the fork's first
    workspace call restores the source's files from the same blobs.

    Raises:
        UsageError: the store here lacks the version (another store than the workers').
    """
    from toren.store._manifest import manifest_key
    from toren.store._store import StoreError, open_store

    versions = open_store().sub("versions")
    try:
        versions.put_bytes(
            manifest_key(fork, version), versions.get_bytes(manifest_key(source, version))
        )
    except StoreError as err:
        raise UsageError(
            f"workspace version {version[:12]} of {source!r} is not readable in this store "
            f"({err}): fork with TOREN_STORE set to the store the workers use"
        ) from None


def first_value(converter: PayloadConverter, payloads: Any) -> Any:
    """The first of `payloads` decoded, or `None` (none, or not decodable here)."""
    if not payloads:
        return None
    try:
        return converter.from_payloads([payloads[0]])[0]
    except Exception:
        return None
