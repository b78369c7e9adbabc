"""Before a deploy: replay what an agent has in flight, and closed lately, against this code.

```python
from datetime import timedelta
from toren import client as toren_client

checks = await toren_client.deploy_check(client, "support", closed_within=timedelta(days=7))
for check in checks:
    print("ok" if check.ok else "BREAKS", check.kind, check.status, check.workflow_id)
```

A worker without Worker Versioning replays each running workflow's history at its next workflow
task (an approval, a message, a timer); a change to workflow code that makes other commands than
the history recorded fails that task with a nondeterminism error, again at every retry. So this
replays what such a worker would: the current run of every running `AgentRun` and `AgentThread`
of the agent, and of the chains that closed within `closed_within` (paths the running ones may
be on). `toren deploy check` prints it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from toren.client._replay import ReplayCheck, replay
from toren.connect import _search_attributes as search_attributes
from toren.errors import UsageError

__all__ = ["ThreadMove", "deploy_check", "move_threads"]

_FETCHING = 8
"""Histories fetched at once."""


async def deploy_check(
    client: Client,
    agent: str,
    *,
    closed_within: timedelta = timedelta(days=7),
    limit: int = 100,
) -> list[ReplayCheck]:
    """Replay `agent`'s running runs and threads, then its recently closed ones, against this code.

    Found through visibility (`TorenAgent`), each chain's current run (the one a worker
    replays), running first, at most `limit` in all; read and replayed through the client's
    converter (the team's codec), as `replay` does. An empty list: the agent has none.

    Args:
        client: connected to the namespace the agent runs in.
        agent: the agent's name, as in its agent.yaml.
        closed_within: how far back closed runs and threads count (by close time).
        limit: at most this many workflows in all.

    Raises:
        UsageError: `agent` is no agent name, `limit` is below 1, or the namespace lacks the
            `TorenAgent` search attribute (`toren setup` adds it).
        UndecodablePayloadError: the payloads are encoded by a codec the client lacks.
    """
    if limit < 1:
        raise UsageError(f"limit must be at least 1, got {limit}")
    wanted = (
        f'WorkflowType IN ("AgentRun", "AgentThread") AND {search_attributes.agent_clause(agent)}'
    )
    since = (datetime.now(UTC) - closed_within).strftime("%Y-%m-%dT%H:%M:%SZ")
    queries = (
        f'{wanted} AND ExecutionStatus = "Running"',
        # A run that continued as new is not its chain's current run; its successor is listed.
        f'{wanted} AND ExecutionStatus != "Running" AND ExecutionStatus != "ContinuedAsNew" '
        f'AND CloseTime >= "{since}"',
    )
    found: list[tuple[str, str]] = []
    for query in queries:
        if len(found) >= limit:
            break
        try:
            found += [
                (execution.id, execution.run_id)
                async for execution in client.list_workflows(query, limit=limit - len(found))
            ]
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT and "TorenAgent" in err.message:
                raise UsageError(
                    f"namespace {client.namespace!r} has no search attribute TorenAgent, so runs "
                    "cannot be found by agent: run `toren setup`, then restart the workers (runs "
                    "started before that are not found by agent; replay those with `toren replay "
                    f"RUN`). Temporal said: {err.message}"
                ) from None
            raise
    gate = asyncio.Semaphore(_FETCHING)

    async def fetch(workflow_id: str, run_id: str) -> WorkflowHistory | None:
        async with gate:
            try:
                return await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return None  # its retention ended between the listing and now
                raise

    histories = await asyncio.gather(*(fetch(*run) for run in found))
    return await replay([h for h in histories if h is not None], client.data_converter)


@dataclass
class ThreadMove:
    """What `move_threads` did for one thread."""

    thread_id: str
    was: str
    """The Worker Deployment Version it was on (`name.build`)."""
    now: str
    """The one it is on when `move_threads` returned."""
    current: str
    """Its deployment's current version."""
    busy: bool = False
    """It is answering a message: it moves by itself once that answer is done."""

    @property
    def moved(self) -> bool:
        """Whether it is on the current version now."""
        return self.now == self.current


async def move_threads(
    client: Client, agent: str, *, wait: timedelta = timedelta(seconds=60)
) -> list[ThreadMove]:
    """Move `agent`'s running threads that rest on an old version onto the current one.

    A thread on a Worker Deployment Version moves to the deployment's current version by itself
    when its next message comes, or when the answer it is writing is done; a thread at rest
    until then keeps the old version's workers busy. This wakes each resting one pinned to
    another version than its deployment's current one (the `upgrade` signal; again after a
    second if the server had not yet told it of the new version, until `wait` is over) and
    reports the busy ones (`busy`), which move by themselves. Threads on unversioned workers,
    or already current, are left alone (and not listed).

    Raises:
        UsageError: as `deploy_check`, for the `TorenAgent` search attribute.
    """
    query = (
        f'WorkflowType = "AgentThread" AND {search_attributes.agent_clause(agent)} '
        'AND ExecutionStatus = "Running"'
    )
    try:
        ids = [execution.id async for execution in client.list_workflows(query)]
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT and "TorenAgent" in err.message:
            raise UsageError(
                f"namespace {client.namespace!r} has no search attribute TorenAgent, so threads "
                f"cannot be found by agent: run `toren setup`. Temporal said: {err.message}"
            ) from None
        raise
    currents: dict[str, str] = {}
    moves: list[ThreadMove] = []
    for thread_id in ids:
        name, was = await _version_of(client, thread_id)
        if not name:
            continue  # unversioned
        if name not in currents:
            currents[name] = await _current_version(client, name)
        if currents[name] and was != currents[name]:
            moves.append(ThreadMove(thread_id, was, was, currents[name]))
    deadline = asyncio.get_running_loop().time() + wait.total_seconds()
    while True:
        resting = [move for move in moves if not move.moved and not move.busy]
        for move in resting:
            handle = client.get_workflow_handle(move.thread_id)
            if await handle.query("execution") is not None:
                move.busy = True  # it moves when this answer is done: no signal needed
                continue
            await handle.signal("upgrade")
        if not resting or asyncio.get_running_loop().time() >= deadline:
            return moves
        await asyncio.sleep(1.0)
        for move in resting:
            move.now = (await _version_of(client, move.thread_id))[1]


async def _version_of(client: Client, workflow_id: str) -> tuple[str, str]:
    """The deployment name and `name.build` version the workflow's current run is on."""
    described = await client.get_workflow_handle(workflow_id).describe()
    version = described.raw_description.workflow_execution_info.versioning_info.deployment_version
    if not version.build_id:
        return "", ""
    return version.deployment_name, f"{version.deployment_name}.{version.build_id}"


async def _current_version(client: Client, deployment: str) -> str:
    """`name.build` of the deployment's current version ("" when it has none)."""
    described = await client.workflow_service.describe_worker_deployment(
        DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
    )
    current = described.worker_deployment_info.routing_config.current_deployment_version
    return f"{current.deployment_name}.{current.build_id}" if current.build_id else ""
