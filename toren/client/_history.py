"""Reading a run back from Temporal: its chain of histories, its first run, its event log.

Every run of a workflow id's continue-as-new chain has a history; these read the whole chain,
oldest first, through the client's converter (the team's codec, offloaded payloads).
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from toren.client._events import Event, read_through, render
from toren.client._fork import no_such_run, recorded_workspace
from toren.client._readable import check_readable

__all__ = ["chain_of", "events", "first_run", "histories", "workspace_version"]


async def chain_of(client: Client, run_id: str) -> list[WorkflowHistory]:
    """`histories`, or a `UsageError` naming a run the namespace does not have."""
    try:
        return await histories(client, run_id)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_such_run(client, run_id) from None
        raise


async def histories(client: Client, run_id: str) -> list[WorkflowHistory]:
    """Every run's history of a workflow id, oldest first (across continue-as-new)."""
    chain: list[WorkflowHistory] = []
    run: str | None = None
    while True:
        history = await client.get_workflow_handle(run_id, run_id=run).fetch_history()
        chain.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        # Walk back the chain: each run names the one it continued.
        run = started.continued_execution_run_id or None
        if run is None:
            return list(reversed(chain))


async def first_run(client: Client, run_id: str) -> str:
    """The run id of the first run of a workflow id's continue-as-new chain."""
    run: str | None = None
    while True:
        handle = client.get_workflow_handle(run_id, run_id=run)
        async for first in handle.fetch_history_events(page_size=1):
            started = first.workflow_execution_started_event_attributes
            break
        else:  # pragma: no cover - a run always has its started event
            raise RuntimeError(f"run {run_id!r} has an empty history")
        if not started.continued_execution_run_id:
            if run is None:  # the latest run is the first: name it, so following stays on it
                run = (await handle.describe()).run_id
            return run
        run = started.continued_execution_run_id


async def workspace_version(client: Client, run_id: str) -> str | None:
    """The workspace version a run's history recorded last (`toren.store._workspace`).

    Looks at the latest run of the chain first: its calls' results, then the state it was
    continued with. None when no call of the run used the workspace.
    """
    converter = client.data_converter
    for history in reversed(await histories(client, run_id)):
        chain = list(history.events)
        await read_through(chain, converter)
        check_readable(client.data_converter, chain)
        for event in reversed(chain):
            found = recorded_workspace(event, converter.payload_converter)
            if found:
                return found
    return None


async def events(client: Client, run_id: str) -> list[Event]:
    """The run's history rendered as Toren's event log, across continue-as-new."""
    chain = [e for h in await histories(client, run_id) for e in h.events]
    await read_through(chain, client.data_converter)
    check_readable(client.data_converter, chain)
    return render(chain, client.data_converter.payload_converter)
