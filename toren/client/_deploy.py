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
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from toren.client._replay import ReplayCheck, replay
from toren.connect import _search_attributes as search_attributes
from toren.errors import UsageError

__all__ = ["deploy_check"]

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
