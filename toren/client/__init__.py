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
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle

from toren.agent._types import RunInput, RunResult
from toren.client._decisions import approve, decide, deny, wait_for_approval
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
from toren.client._inbox import InboxItem, QuestionItem, inbox, pending, question_inbox
from toren.client._memo import start_memo
from toren.client._nested import nested_events
from toren.client._output import typed_output
from toren.client._questions import answer, pending_questions
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
from toren.errors import UsageError

__all__ = [
    "Divergence",
    "EvalCase",
    "EvalSource",
    "InboxItem",
    "QuestionItem",
    "LiveStream",
    "ReplayCheck",
    "Scorer",
    "ToolStep",
    "Trajectory",
    "Turn",
    "ThreadMove",
    "StreamEvent",
    "answer",
    "pending_questions",
    "question_inbox",
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
    "nested_events",
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
        memo=start_memo(prompt) or None,
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
