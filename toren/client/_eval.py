"""Eval runs: a recorded run's prompt run again with a changed agent, never touching the world.

```python
source = await toren_client.eval_source(client, "support-a1")  # start input, trajectory
handle = await start_eval(client, source, task_queue="support.eval")
```

An eval run is an ordinary `AgentRun` whose input carries the source's recorded tool calls
(`RunInput.eval`): the workflow answers each `external` call from them and never executes one
(`toren.workflows._eval_calls`). It is marked by its memo (`toren_eval`, set at start: no
workflow command) and runs on a task queue where the changed agent is served. `toren eval` and
`toren.testing.eval_runs` start them and compare trajectories.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError

from toren.agent._types import RunInput, RunResult
from toren.client._events import read_through, render
from toren.client._fork import copy_workspace, first_value
from toren.client._readable import check_readable
from toren.client._render_core import tool_of
from toren.client._trajectory import (
    BUILT_IN,
    Divergence,
    Scorer,
    Trajectory,
    divergence,
    trajectory,
)
from toren.connect import _search_attributes as search_attributes
from toren.errors import UsageError
from toren.workflows._input import ON_DIVERGE

__all__ = [
    "EVAL_MEMO_KEY",
    "EvalCase",
    "EvalSource",
    "is_eval",
    "recorded_calls",
    "run_evals",
    "runs_matching",
    "score",
    "source_from_histories",
    "start_eval",
]

EVAL_MEMO_KEY = "toren_eval"
"""The memo key marking an eval run: `{"source": run_id, "agent": name}`."""


@dataclass
class EvalSource:
    """A recorded run to evaluate against: how it started, and what it did."""

    run_id: str
    agent: str
    start: dict[str, Any]
    """Its start input (agent, prompt, arguments, messages, attachments, user_id)."""
    trajectory: Trajectory
    workspaces: dict[str, str] = field(default_factory=dict)
    """The workspace version each of its sandbox calls started from, by call id."""

    def calls(self) -> list[dict[str, Any]]:
        """Its tool calls as `RunInput.eval["calls"]`."""
        return recorded_calls(self.trajectory, self.workspaces)


def recorded_calls(
    path: Trajectory, workspaces: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The calls of `path` an eval answers from: `[{tool, args, result, is_error, decision?}]`.

    Calls that never finished, and those the model's provider ran, answer nothing.
    """
    calls = []
    for call in path.calls:
        if call.result is None or call.provider:
            continue
        recorded: dict[str, Any] = {
            "tool": call.tool,
            "args": call.args,
            "result": call.result,
            "is_error": call.is_error,
        }
        if call.approval and "approved" in call.approval:
            recorded["decision"] = {
                "approved": bool(call.approval["approved"]),
                "by": str(call.approval.get("by") or ""),
                "comment": str(call.approval.get("comment") or ""),
            }
        version = (workspaces or {}).get(call.call_id)
        if version:
            recorded["workspace"] = version
        calls.append(recorded)
    return calls


async def source_from_histories(
    chain: list[WorkflowHistory],
    converter: PayloadConverter,
    agent: str | None = None,
    client: Client | None = None,
) -> EvalSource:
    """A recorded run (its chain's histories, oldest first) as the source of an eval.

    `client` reads offloaded payloads through its store and codec; without one, the histories
    must hold their payloads (a file `toren.testing` loads).

    Raises:
        UsageError: not an `AgentRun` (a thread, another workflow), a fork or an eval run
            itself, or a run of another agent than `agent`: each says which.
    """
    run_id = chain[0].workflow_id
    events = [e for h in chain for e in h.events]
    if client is not None:
        await read_through(events, client.data_converter)
        check_readable(client.data_converter, events)
    started = events[0].workflow_execution_started_event_attributes
    kind = started.workflow_type.name
    if kind != "AgentRun":
        what = "a thread" if kind == "AgentThread" else f"a {kind} workflow"
        raise UsageError(f"{run_id!r} is {what}: an eval re-runs agent runs (AgentRun)")
    start = first_value(converter, started.input.payloads)
    if not isinstance(start, dict) or not isinstance(start.get("prompt"), str):
        raise UsageError(f"{run_id!r} did not start with a run's input: nothing to re-run")
    if start.get("fork") or start.get("eval"):
        which = "a fork" if start.get("fork") else "an eval run"
        raise UsageError(f"{run_id!r} is {which}: evaluate the run it came from")
    found = str(start.get("agent") or "")
    if agent is not None and found != agent:
        raise UsageError(
            f"run {run_id!r} is of agent {found!r}, not {agent!r}: evaluate a changed copy "
            f"of {found!r} against it"
        )
    keep = ("agent", "prompt", "arguments", "messages", "attachments", "user_id")
    return EvalSource(
        run_id=run_id,
        agent=found,
        start={k: start[k] for k in keep if start.get(k) is not None},
        trajectory=trajectory(render(events, converter), run_id),
        workspaces=_workspaces_before(events, converter),
    )


async def start_eval(
    client: Client,
    source: EvalSource,
    *,
    task_queue: str,
    on_diverge: str = "continue",
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start an eval run of `source` on `task_queue`, where the changed agent is served.

    `on_diverge`: `continue` (a call the record cannot answer gets an error result, and the
    run goes on) or `stop` (the run fails with kind `Diverged`).

    Raises:
        UsageError: a wrong `on_diverge`, or a workspace version this store lacks.
    """
    if on_diverge not in ON_DIVERGE:
        raise UsageError(f"on_diverge must be one of {', '.join(ON_DIVERGE)}, got {on_diverge!r}")
    new_id = workflow_id or f"{source.agent}-eval-{uuid.uuid4().hex[:12]}"
    calls = source.calls()
    for version in dict.fromkeys(c["workspace"] for c in calls if c.get("workspace")):
        await asyncio.to_thread(copy_workspace, source.run_id, new_id, version)
    start = source.start
    return await client.start_workflow(
        "AgentRun",
        RunInput(
            agent=source.agent,
            prompt=start["prompt"],
            arguments=start.get("arguments"),
            messages=start.get("messages"),
            attachments=start.get("attachments"),
            user_id=start.get("user_id"),
            eval={"run_id": source.run_id, "calls": calls, "on_diverge": on_diverge},
        ),
        id=new_id,
        task_queue=task_queue,
        result_type=RunResult,
        memo={EVAL_MEMO_KEY: {"source": source.run_id, "agent": source.agent}},
        search_attributes=await search_attributes.start_attributes(client, source.agent),
        static_summary=f"{source.agent}: eval of {source.run_id}"[:200],
        static_details=(
            f"**agent** `{source.agent}` · eval of {source.run_id} (`toren eval`): its prompt "
            f"run again by a changed agent on `{task_queue}`. External tools never run here: "
            f"their calls are answered from the {len(calls)} calls the run recorded, or marked "
            "diverged; approvals are taken from the recorded decisions, never asked."
        ),
    )


async def runs_matching(client: Client, query: str, limit: int = 20) -> list[str]:
    """The closed `AgentRun` runs a visibility `query` chooses, newest first, no eval runs.

    Raises:
        UsageError: Temporal refused the query, or it chooses no run.
    """
    full = (
        f"({query}) AND WorkflowType = 'AgentRun' AND ExecutionStatus != 'Running' "
        "AND ExecutionStatus != 'ContinuedAsNew'"
    )
    found: list[str] = []
    try:
        async for run in client.list_workflows(full):
            if is_eval(await run.memo()) or run.id in found:
                continue
            found.append(run.id)
            if len(found) >= limit:
                break
    except RPCError as err:
        raise UsageError(f"the query {query!r}: Temporal refused it ({err.message})") from None
    if not found:
        raise UsageError(f"the query {query!r} chooses no closed agent run")
    return found


def is_eval(memo: Mapping[str, Any]) -> bool:
    """Whether a run's memo marks it an eval run."""
    return EVAL_MEMO_KEY in memo


def _workspaces_before(events: list[HistoryEvent], converter: PayloadConverter) -> dict[str, str]:
    """The workspace version each tool activity started from, by call id."""
    found: dict[str, str] = {}
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if tool_of(scheduled.activity_type.name) is None:
            continue
        body = first_value(converter, scheduled.input.payloads)
        if isinstance(body, dict) and body.get("workspace") and body.get("call_id"):
            found[str(body["call_id"])] = str(body["workspace"])
    return found


@dataclass
class EvalCase:
    """One recorded run and its eval run, side by side, with the scores."""

    source: str
    eval_run: str
    original: Trajectory
    candidate: Trajectory
    divergence: Divergence | None
    scores: dict[str, float] = field(default_factory=dict)

    def answers(self, answer: str) -> int:
        """How many of the candidate's calls were answered so (`diverged`, `would_ask`...)."""
        return sum(1 for c in self.candidate.calls if c.eval == answer)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "source": self.source,
            "eval_run": self.eval_run,
            "divergence": asdict(self.divergence) if self.divergence else None,
            "answered_from_record": self.answers("recorded"),
            "diverged_calls": self.answers("diverged"),
            "would_ask": self.answers("would_ask"),
            "scores": self.scores,
            "original": self.original.to_dict(),
            "candidate": self.candidate.to_dict(),
        }


async def run_evals(
    client: Client,
    sources: list[EvalSource],
    *,
    task_queue: str,
    scorers: dict[str, Scorer] | None = None,
    parallel: int = 4,
    on_diverge: str = "continue",
) -> list[EvalCase]:
    """Eval each of `sources` on `task_queue` (at most `parallel` at once), wait, compare.

    A changed agent must be served on `task_queue` meanwhile. Cases come in `sources`' order;
    an eval run that failed (a `Diverged` stop included) is a case with that status. Cancelled
    (Ctrl-C), it terminates the eval runs still going: their queue is served no more.
    """
    scorers = dict(scorers or BUILT_IN)
    limit = asyncio.Semaphore(max(1, parallel))

    async def one(source: EvalSource) -> EvalCase:
        async with limit:
            handle = await start_eval(client, source, task_queue=task_queue, on_diverge=on_diverge)
            try:
                with contextlib.suppress(WorkflowFailureError):
                    await handle.result()
            except asyncio.CancelledError:
                # Stopped (Ctrl-C): nobody will serve its queue, so it would wait for nothing.
                with contextlib.suppress(RPCError):
                    await asyncio.shield(handle.terminate("the eval that started it stopped"))
                raise
        chain: list[WorkflowHistory] = []
        run: str | None = None
        while True:  # the eval run's chain, across continue-as-new
            history = await client.get_workflow_handle(handle.id, run_id=run).fetch_history()
            chain.insert(0, history)
            started = history.events[0].workflow_execution_started_event_attributes
            run = started.continued_execution_run_id or None
            if run is None:
                break
        events = [e for h in chain for e in h.events]
        await read_through(events, client.data_converter)
        candidate = trajectory(render(events, client.data_converter.payload_converter))
        candidate.run_id = handle.id
        return EvalCase(
            source=source.run_id,
            eval_run=handle.id,
            original=source.trajectory,
            candidate=candidate,
            divergence=divergence(source.trajectory, candidate),
            scores=score(scorers, source.trajectory, candidate),
        )

    return list(await asyncio.gather(*(one(s) for s in sources)))


def score(
    scorers: dict[str, Scorer], original: Trajectory, candidate: Trajectory
) -> dict[str, float]:
    """Every scorer's score; a scorer's dict adds one score per key (`name.key`).

    A scorer that raises scores NaN (the table shows `error`, the JSON null): one bad case
    does not lose the others' report.
    """
    scores: dict[str, float] = {}
    for name, scorer in scorers.items():
        try:
            found = scorer(original, candidate)
        except Exception:
            scores[name] = float("nan")
            continue
        if isinstance(found, dict):
            scores.update({f"{name}.{k}": float(v) for k, v in found.items()})
        else:
            scores[name] = float(found)
    return scores
