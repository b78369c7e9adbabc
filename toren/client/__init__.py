"""The client's side: starting runs, deciding approvals, following and reading them from Python.

Beside this public module: the event log rendered from history (`_events`), streams of live
output (`_stream`, one shared reader per run and process in `_stream_feed`), threads
(`_threads`), the check that this client can read a run before it writes into it
(`_readable`), and replaying histories against this code (`_replay`), an agent's in flight
before a deploy (`_deploy`), where a fork of a run starts (`_fork`), eval runs (`_eval`) and
the trajectories and scorers they are compared by (`_trajectory`). Imports `agent`, `store`,
`connect` and `workflows`; never the worker's side.

```python
from toren import client as toren_client
from toren.connect import connect

client = await connect()
handle = await toren_client.start_run(client, "support", "Refund order A-1001")
for call in await toren_client.wait_for_approval(client, handle.id, timeout=60):
    await toren_client.approve(client, handle.id, call.call_id, by="alice")
result = await handle.result()
```

A run is also startable without toren: `AgentRun` takes a plain JSON object
(`{"agent": ..., "prompt": ...}`) on the agent's task queue.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from toren.agent._types import Decision, PendingApproval, RunInput, RunResult
from toren.client._deploy import ThreadMove, deploy_check, move_threads
from toren.client._eval import (
    EvalCase,
    EvalSource,
    is_eval,
    run_evals,
    runs_matching,
    source_from_histories,
    start_eval,
)
from toren.client._eval_report import as_json as eval_json
from toren.client._eval_report import markdown as eval_markdown
from toren.client._eval_report import table as eval_table
from toren.client._fork import copy_workspace, fork_point
from toren.client._history import chain_of, events, first_run, histories, workspace_version
from toren.client._output import typed_output
from toren.client._readable import ensure_readable
from toren.client._replay import ReplayCheck, replay
from toren.client._stream import LiveStream, StreamEvent, stream
from toren.client._threads import close_thread, messages, send_message, start_thread
from toren.client._trajectory import (
    Divergence,
    Scorer,
    ToolStep,
    Trajectory,
    Turn,
    divergence,
    exact_match,
    load_scorer,
    tool_sequence,
    trajectory,
)
from toren.connect import _search_attributes as search_attributes
from toren.errors import ApprovalWaitError, UndecodablePayloadError, UsageError

__all__ = [
    "Divergence",
    "EvalCase",
    "EvalSource",
    "InboxItem",
    "LiveStream",
    "ReplayCheck",
    "Scorer",
    "ToolStep",
    "Trajectory",
    "Turn",
    "ThreadMove",
    "StreamEvent",
    "approve",
    "attach",
    "close_thread",
    "decide",
    "deny",
    "deploy_check",
    "move_threads",
    "divergence",
    "eval_json",
    "eval_markdown",
    "eval_source",
    "eval_table",
    "events",
    "exact_match",
    "is_eval",
    "load_scorer",
    "first_run",
    "fork_run",
    "histories",
    "inbox",
    "messages",
    "pending",
    "replay",
    "run_agent",
    "run_evals",
    "runs_matching",
    "send_message",
    "start_run",
    "source_from_histories",
    "start_eval",
    "start_thread",
    "stream",
    "tool_sequence",
    "trajectory",
    "wait_for_approval",
    "workspace_version",
]


def attach(path_or_bytes: str | bytes, name: str | None = None) -> str:
    """Parse a file into the attachment store and return its id for `start_run(attachments=)`.

    The worker must use the same store (`TOREN_STORE`: a directory every host shares, or S3).
    """
    from toren.store._attachments import attach as store_attach

    return store_attach(path_or_bytes, name).id


async def start_run(
    client: Client,
    agent: str,
    prompt: str,
    *,
    run_id: str | None = None,
    arguments: dict[str, Any] | None = None,
    messages: list[dict[str, Any]] | None = None,
    attachments: list[str] | None = None,
    task_queue: str | None = None,
    execution_timeout: timedelta | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start an `AgentRun`; the run id is `run_id` or `<agent>-<random>`.

    Never pass secrets in `prompt` or `arguments`: run input is stored in history.
    """
    first_line = prompt.strip().splitlines()[0] if prompt.strip() else ""
    return await client.start_workflow(
        "AgentRun",
        RunInput(
            agent=agent,
            prompt=prompt,
            arguments=arguments,
            messages=messages,
            attachments=attachments,
        ),
        id=run_id or f"{agent}-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue or agent,
        result_type=RunResult,
        execution_timeout=execution_timeout,
        search_attributes=await search_attributes.start_attributes(client, agent),
        static_summary=f"{agent}: {first_line[:120]}",
        static_details=(
            f"**agent** `{agent}` · started with `toren.client`\n\n"
            "Tool calls that need a person show up under **Current Details** with the exact "
            "JSON to paste into **More Actions → Send a Signal** (`approve` / `deny`)."
        ),
    )


async def fork_run(
    client: Client,
    run_id: str,
    at_step: int,
    *,
    execution: int | None = None,
    prompt_append: str | None = None,
    workflow_id: str | None = None,
    task_queue: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a new `AgentRun` from run `run_id`'s conversation at its model call `at_step`.

    The fork starts with what that call saw (the transcript up to it, the key-value state,
    the workspace version, the attachments) and goes on live from it: its first model call is
    step `at_step` again, and nothing before it runs again. `execution` picks one execution
    (message) of a thread; `prompt_append` adds one user message after the cut. It runs on
    `task_queue`, by default the source's (whose workers continue it); a queue where a changed
    agent is served (`toren.worker.serve(..., task_queue=)`) runs the changed agent instead.
    The source may be running or closed; a worker serving its task queue answers the queries
    that read its transcript.

    ```python
    handle = await toren_client.fork_run(client, "support-1a2b", 2, prompt_append="Be brief.")
    result = await handle.result()
    ```

    Raises:
        UsageError: no such run, a step past its end, a thread without `execution`, or no
            worker to read the transcript from (the message says which, and what to do).
    """
    if at_step < 1:
        raise UsageError(f"a step is a model call's number, from 1; got {at_step}")
    chain = await chain_of(client, run_id)
    point = await fork_point(client, chain, at_step, execution)
    new_id = workflow_id or f"{point.agent}-fork-{uuid.uuid4().hex[:12]}"
    if point.workspace:
        await asyncio.to_thread(copy_workspace, run_id, new_id, point.workspace)
    messages = list(point.messages)
    where = f"{run_id} at step {at_step}" + (f" of execution {execution}" if execution else "")
    return await client.start_workflow(
        "AgentRun",
        RunInput(
            agent=point.agent,
            prompt=prompt_append or "",
            arguments=point.arguments,
            messages=messages,
            attachments=point.attachments,
            user_id=point.user_id,
            fork=point.fork(),
        ),
        id=new_id,
        task_queue=task_queue or point.task_queue,
        result_type=RunResult,
        search_attributes=await search_attributes.start_attributes(client, point.agent),
        static_summary=f"{point.agent}: fork of {where}"[:200],
        static_details=(
            f"**agent** `{point.agent}` · forked from {where} with `toren.client.fork_run`: "
            f"it starts from that step's conversation ({len(messages)} messages), state and "
            "workspace, and runs on from there.\n\n"
            "Tool calls that need a person show up under **Current Details** with the exact "
            "JSON to paste into **More Actions → Send a Signal** (`approve` / `deny`)."
        ),
    )


async def run_agent(client: Client, agent: str, prompt: str, **kwargs: Any) -> RunResult:
    """Start a run, wait for its result; `output_type=`: a pydantic class `output` is built as."""
    output_type = kwargs.pop("output_type", None)  # the rest are `start_run`'s
    handle = await start_run(client, agent, prompt, **kwargs)
    return typed_output(await handle.result(), output_type)


async def decide(
    client: Client,
    run_id: str,
    call_id: str,
    approved: bool,
    *,
    by: str | None = None,
    comment: str = "",
) -> Decision:
    """Approve or deny a waiting call through the `decide` update; returns the recorded decision.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the call is unknown or already decided
            (the message says which calls wait).
        UndecodablePayloadError: the run's payloads are encoded by a codec this client lacks;
            with `accepted` true the decision was recorded and only its answer is unreadable,
            else nothing was sent.
    """
    await ensure_readable(client, run_id)
    handle = client.get_workflow_handle(run_id)
    try:
        decision: Decision = await handle.execute_update(
            "decide",
            {
                "call_id": call_id,
                "approve": approved,
                "by": by or client.identity,
                "comment": comment,
            },
            result_type=Decision,
        )
    except UndecodablePayloadError as err:
        # The run recorded the decision; only its answer is unreadable here.
        raise UndecodablePayloadError(err.encoding, accepted=True) from None
    return decision


async def approve(
    client: Client, run_id: str, call_id: str, *, by: str | None = None, comment: str = ""
) -> Decision:
    """Approve a waiting call; it then runs once with its recorded args."""
    return await decide(client, run_id, call_id, True, by=by, comment=comment)


async def deny(
    client: Client, run_id: str, call_id: str, *, by: str | None = None, comment: str = ""
) -> Decision:
    """Deny a waiting call; the model sees `denied by <by>: <comment>`."""
    return await decide(client, run_id, call_id, False, by=by, comment=comment)


async def pending(client: Client, run_id: str) -> list[PendingApproval]:
    """The run's calls waiting for a decision."""
    handle = client.get_workflow_handle(run_id)
    calls: list[PendingApproval] = await handle.query(
        "pending_approvals", result_type=list[PendingApproval]
    )
    return calls


async def wait_for_approval(
    client: Client, run_id: str, *, timeout: float = 60.0, every: float = 0.2
) -> list[PendingApproval]:
    """Wait until at least one call of the run waits for a decision; return the waiting calls.

    `pending` answers at once, so right after `start_run` it is usually `[]`: the run has not
    reached its gated call yet. Use this before approving.

    Raises:
        ApprovalWaitError: no call waited within `timeout` seconds, or the run closed first.
    """
    handle = client.get_workflow_handle(run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        description = await handle.describe()
        if description.status not in (None, WorkflowExecutionStatus.RUNNING):
            if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
                raise ApprovalWaitError(
                    f"run {run_id!r} closed ({description.status.name.lower()}) "
                    "before any call waited for approval"
                )
        else:
            # A query waits for a worker; with none polling it would block past `timeout`.
            left = max(1.0, min(5.0, deadline - asyncio.get_running_loop().time()))
            try:
                calls: list[PendingApproval] = await handle.query(
                    "pending_approvals",
                    result_type=list[PendingApproval],
                    rpc_timeout=timedelta(seconds=left),
                )
            except RPCError:
                calls = []  # no worker answered yet
            if calls:
                return calls
        if asyncio.get_running_loop().time() >= deadline:
            raise ApprovalWaitError(
                f"no call of run {run_id!r} waited for approval within {timeout:g} s "
                f"(is a worker serving its task queue? `toren events {run_id}` shows where it is)"
            )
        await asyncio.sleep(every)


async def eval_source(client: Client, run_id: str, agent: str | None = None) -> EvalSource:
    """Read run `run_id` (its whole chain) as the source of an eval (`start_eval`).

    Raises:
        UsageError: no such run, not an `AgentRun`, a fork or an eval run itself, or a run of
            another agent than `agent` (each says which).
    """
    chain = await chain_of(client, run_id)
    return await source_from_histories(
        chain, client.data_converter.payload_converter, agent, client
    )


@dataclass
class InboxItem:
    """A call waiting for a decision, somewhere in the namespace."""

    run_id: str
    agent: str
    call: PendingApproval

    @property
    def age(self) -> timedelta:
        """How long the call has waited."""
        since = datetime.fromisoformat(self.call.requested_at)
        return datetime.now(since.tzinfo) - since


async def inbox(client: Client, agent: str | None = None) -> list[InboxItem]:
    """Every call waiting for a decision in the namespace (oldest first).

    Uses the `TorenStatus` search attribute (visibility), then asks each waiting run.
    """
    # A run terminated, cancelled or timed out while waiting keeps its last TorenStatus.
    query = (
        'WorkflowType IN ("AgentRun", "AgentThread") AND ExecutionStatus = "Running" '
        'AND TorenStatus = "waiting_approval"'
    )
    if agent is not None:
        query += f" AND {search_attributes.agent_clause(agent)}"
    items: list[InboxItem] = []
    async for execution in client.list_workflows(query):
        try:
            calls = await pending(client, execution.id)
        except UndecodablePayloadError:
            raise  # every run of the namespace is encoded alike: say how to read them
        except Exception:  # finished between the listing and the query
            continue
        name = execution.typed_search_attributes.get(search_attributes.AGENT_KEY) or ""
        items += [InboxItem(run_id=execution.id, agent=name, call=c) for c in calls]
    return sorted(items, key=lambda i: i.call.requested_at)
