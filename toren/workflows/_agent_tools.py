"""Agents as tools inside `AgentRun`: a call starts a child `AgentRun` and waits for its answer.

agent.yaml `agents:` (`toren.worker._agent_tools`) makes each entry a tool taking `{"prompt"}`.
A call starts the child agent as a child workflow whose id derives from this run and the call
(`<run>/<tool>/<call id>`): a replay reads the recorded start, a retried task too, so a call
never starts a second child. The run waits at zero compute; the child's final answer (its typed
output as JSON, where it declares one) is the tool's result. A child that fails, runs out of
budget, times out or is cancelled comes back as an error result: the parent goes on. The child
is cancelled with its parent (`REQUEST_CANCEL`).

The tree keeps the contract:
- Budgets: the child gets what its parent has left (tokens, cost, wall clock) in `RunState.tree`,
  the one carry a new run accepts (from a parent only); its usage counts into the parent's.
- Approvals: a child's gated call is announced to its parent (a signal, on this path only),
  which publishes it with its path and lists it in `pending_approvals`; a person decides it
  through the parent (the client sends the decision to the child's `decide`).
- Parallel: one turn's calls run concurrently already; `limits.maxParallelAgents` bounds the
  children running at once, and results come back in call order.

Workflow-side code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import ToolSpec
    from toren.agent._types import PendingApproval, RunInput, RunState
    from toren.workflows._background import count_failed_child

__all__ = [
    "CHILD_APPROVAL_SIGNAL",
    "AgentTools",
    "adopt_tree",
    "child_path",
    "earliest_deadline",
    "tree_problems",
]

Publish = Callable[[str, dict[str, Any]], None]
CountUsage = Callable[[dict[str, Any], float | None], None]

CHILD_APPROVAL_SIGNAL = "toren_child_approval"
"""The signal a child run sends its parent when one of its calls starts or stops waiting."""
_RELAYED = {"approval_requested": "requested", "approval_decided": "decided"}
_TREE_KEYS = ("path", "tool", "call_id", "tokens", "cost_usd", "deadline")


class AgentTools:
    """The agent-tool children of one run, and the calls waiting inside them."""

    def __init__(self, run: RunState, count_usage: CountUsage, publish: Publish) -> None:
        self._run = run
        self._count_usage = count_usage
        """Counts a finished child's usage and cost into this run's budget."""
        self._publish = publish
        self._running = 0
        self._slots: asyncio.Semaphore | None = None
        self._waiting: dict[tuple[str, str], PendingApproval] = {}
        """Calls waiting in children (any depth), by `(run id, call id)`."""
        self._signals: list[asyncio.Future[None]] = []

    def running(self) -> bool:
        """Whether a child runs (its answer can only reach this run: no continue-as-new)."""
        return self._running > 0

    def waiting(self) -> list[PendingApproval]:
        """The calls waiting in this run's children, oldest first."""
        return sorted(self._waiting.values(), key=lambda p: p.requested_at)

    async def call(self, tool: ToolSpec, call_id: str, args: dict[str, Any]) -> tuple[str, bool]:
        """Run the agent tool's child to its answer; return the result text and whether it failed.

        Never raises for the child's failure; a cancellation of this run goes on up.
        """
        spec = self._run.spec
        assert spec is not None and tool.native is not None
        name = tool.native.removeprefix("agent:")
        entry = spec.agents.get(name)
        if entry is None:
            return f"agent tool {name!r} is not in this run's recorded spec; nothing ran", True
        tree, problem = self._child_tree(name, call_id, str(entry["agent"]))
        if problem is not None:
            return f"{name}: {problem}; nothing ran", True
        info = workflow.info()
        flow = f"{info.workflow_id}#{self._run.execution}" if self._run.execution else None
        child_id = f"{flow or info.workflow_id}/{name}/{call_id}"
        prompt = str(args.get("prompt", ""))
        if self._slots is None:
            self._slots = asyncio.Semaphore(spec.max_parallel_agents)
        self._running += 1
        try:
            async with self._slots:
                return await self._run_child(name, entry, child_id, prompt, tree)
        finally:
            self._running -= 1
            # Whatever waited in it (or deeper) waits no more.
            for key in [k for k in self._waiting if f"{k[0]}/".startswith(f"{child_id}/")]:
                del self._waiting[key]

    def _child_tree(self, name: str, call_id: str, agent: str) -> tuple[dict[str, Any], str | None]:
        """The child's `RunState.tree`: its path and what this run has left, or why none is left."""
        run, spec = self._run, self._run.spec
        assert spec is not None
        own = run.tree or {}
        path = [*(own.get("path") or [spec.name]), agent]
        tree: dict[str, Any] = {"path": path, "tool": name, "call_id": call_id}
        spent = run.spent or {}
        for key, limit in (("tokens", spec.max_tokens_budget), ("cost_usd", spec.max_cost_usd)):
            caps = [c for c in (limit, own.get(key)) if isinstance(c, int | float)]
            if caps:
                left = min(caps) - float(spent.get(key, 0) or 0)
                if left <= 0:
                    word = "token" if key == "tokens" else "cost"
                    return tree, f"this run's {word} budget is used up"
                tree[key] = int(left) if key == "tokens" else round(left, 6)
        if run.deadline is not None:
            tree["deadline"] = run.deadline
        return tree, None

    async def _run_child(
        self, name: str, entry: dict[str, Any], child_id: str, prompt: str, tree: dict[str, Any]
    ) -> tuple[str, bool]:
        agent = str(entry["agent"])
        first = prompt.strip().splitlines()[0][:100] if prompt.strip() else ""
        try:
            handle = await workflow.start_child_workflow(
                "AgentRun",
                {"agent": agent, "prompt": prompt, "carry": {"tree": tree}},
                id=child_id,
                task_queue=str(entry["task_queue"]),
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"{name}: {first}",
            )
        except WorkflowAlreadyStartedError:
            # Only a run that is not this one's (a reset's earlier run started it): its answer
            # cannot reach this run, and a second child would do the work twice.
            return (
                f"{name}: run {child_id!r} already runs, started by an earlier run of this "
                "workflow; its answer cannot reach this run. Nothing new was started",
                True,
            )
        try:
            result = await handle
        except ChildWorkflowError as err:
            count_failed_child(err, self._count_usage)
            return f"agent {agent} ({name}) gave no answer: {_why(err.cause)}", True
        if not isinstance(result, dict):
            return json.dumps(result, default=str), False
        if isinstance(result.get("usage"), dict):
            self._count_usage(result["usage"], result.get("cost_usd"))
        output = result.get("output")
        if output is not None:
            return json.dumps(output, ensure_ascii=False), False
        return str(result.get("text", "")), False

    # -- approvals inside children ---------------------------------------------------------

    def relay(self, publish: Publish) -> Publish:
        """`publish`, which in a child run also tells the parent of its waiting calls."""

        def relayed(type_: str, fields: dict[str, Any]) -> None:
            publish(type_, fields)
            if self._run.tree is not None and type_ in _RELAYED:
                path = [*(self._run.tree.get("path") or []), str(fields.get("name", ""))]
                info = workflow.info()
                self._tell_parent(
                    {
                        **fields,
                        "event": _RELAYED[type_],
                        "run_id": info.workflow_id,
                        "path": path,
                        "step": self._run.step,
                        "at": workflow.now().isoformat(),
                    }
                )

        return relayed

    def _tell_parent(self, payload: dict[str, Any]) -> None:
        parent = workflow.info().parent
        if parent is None:
            return
        self._signals.append(asyncio.ensure_future(self._signal(parent.workflow_id, payload)))

    async def _signal(self, parent_id: str, payload: dict[str, Any]) -> None:
        try:
            handle = workflow.get_external_workflow_handle(parent_id)
            await handle.signal(CHILD_APPROVAL_SIGNAL, payload)
        except Exception as err:  # the parent has ended: nobody to tell
            workflow.logger.warning(
                "could not tell parent %s of a waiting call: %s", parent_id, err
            )

    def on_child_approval(self, payload: tuple[Any, ...], refused: list[dict[str, Any]]) -> None:
        """A child's call started or stopped waiting; a bad payload is refused and recorded."""
        item = payload[0] if len(payload) == 1 else None
        problem = _child_item_problem(item, workflow.info().workflow_id)
        if problem is not None or not isinstance(item, dict):
            shown = json.dumps(payload, default=repr)[:500]
            refused.append(
                {"signal": CHILD_APPROVAL_SIGNAL, "payload": shown, "reason": problem or "",
                 "at": workflow.now().isoformat()}
            )  # fmt: skip
            workflow.logger.warning("refused %s: %s", CHILD_APPROVAL_SIGNAL, problem)
            return
        key = (item["run_id"], item["call_id"])
        fields = {k: v for k, v in item.items() if k not in ("event", "at", "step")}
        if item["event"] == "requested":
            self._waiting[key] = PendingApproval(
                call_id=item["call_id"],
                tool=str(item.get("name", "")),
                args=args if isinstance(args := item.get("args"), dict) else {},
                requested_at=str(item.get("at", "")),
                reason=str(item.get("reason") or ""),
                step=item.get("step") or 0,
                expires_at=item.get("expires_at")
                if isinstance(item.get("expires_at"), str)
                else None,  # fmt: skip
                approvers=item.get("approvers")
                if isinstance(item.get("approvers"), list)
                else None,  # fmt: skip
                run_id=item["run_id"],
                path=[str(p) for p in item["path"]],
            )
            self._publish("approval_requested", fields)
        elif self._waiting.pop(key, None) is not None:
            self._publish("approval_decided", fields)
        else:
            return  # decided by a grant, never announced here: nothing waited
        if self._run.tree is not None:  # a grandchild's: this run's parent hears it too
            self._tell_parent(item)


def _child_item_problem(item: Any, own_id: str) -> str | None:
    if not isinstance(item, dict):
        return "expected one JSON object"
    if item.get("event") not in ("requested", "decided"):
        return "'event' must be requested or decided"
    run_id, call_id, path = item.get("run_id"), item.get("call_id"), item.get("path")
    # A run's children are `<run>/<tool>/<call>`; a thread's, `<thread>#<execution>/...`.
    if not isinstance(run_id, str) or not run_id.startswith((own_id + "/", own_id + "#")):
        return f"'run_id' {run_id!r} is no child run of this run"
    if not isinstance(call_id, str) or not call_id:
        return "'call_id' must be a non-empty string"
    if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
        return "'path' must be a list of names"
    step = item.get("step", 0)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return "'step' must be an integer"
    if not 0 <= (step or 0) < 10**9:
        return "'step' is out of range"
    approvers = item.get("approvers")
    if approvers is not None and (
        not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers)
    ):
        return "'approvers' must be a list of names or null"
    if item.get("args") is not None and not isinstance(item["args"], dict):
        return "'args' must be a JSON object"
    for key in ("name", "reason", "at", "expires_at"):
        if item.get(key) is not None and not isinstance(item[key], str):
            return f"'{key}' must be a string"
    return None


def _why(cause: BaseException | None) -> str:
    """Why a child gave no answer, in a line the model can read."""
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'failed'}: {cause.message}"
    if isinstance(cause, CancelledError):
        return "it was cancelled"
    if isinstance(cause, TerminatedError):
        return "it was terminated"
    if isinstance(cause, TimeoutError):
        return "it timed out"
    return str(cause) or type(cause).__name__


# -- the child's side ------------------------------------------------------------------------


def adopt_tree(input: RunInput, run: RunState) -> RunInput:
    """A new child run's input: the parent's `carry` (a tree only) moves into `run`.

    A run that continued as new keeps its carry whole, as before.
    """
    if input.carry is None or workflow.info().continued_run_id:
        return input
    run.tree = input.carry.tree
    return dataclasses.replace(input, carry=None)


def child_path(calls: list[PendingApproval], run: RunState) -> list[PendingApproval]:
    """A child run's own waiting calls, each with its path in the tree (as its inbox shows)."""
    if run.tree is None:
        return calls
    path = [str(p) for p in run.tree.get("path") or []]
    return [dataclasses.replace(c, path=[*path, c.tool]) for c in calls]


def earliest_deadline(run: RunState) -> str | None:
    """The run's wall-clock deadline: its own, or its parent's when that comes first."""
    parent = (run.tree or {}).get("deadline")
    if not isinstance(parent, str):
        return run.deadline
    if run.deadline is None:
        return parent
    return min(run.deadline, parent, key=datetime.fromisoformat)


def tree_problems(carry: Any) -> list[str] | None:
    """Why `carry` is not what a parent run gives the agent-tool child it starts.

    `None`: `carry` is no tree at all (only a continued run may bring any other carry).
    """
    if not isinstance(carry, dict) or set(carry) != {"tree"} or workflow.info().parent is None:
        return None
    tree = carry["tree"]
    if not isinstance(tree, dict):
        return ["'carry.tree' must be a JSON object"]
    problems = [f"'carry.tree': unknown key {k!r}" for k in tree if k not in _TREE_KEYS]
    path = tree.get("path")
    if not isinstance(path, list) or not path or not all(isinstance(p, str) for p in path):
        problems.append("'carry.tree.path' must be a list of agent names")
    for key in ("tool", "call_id"):
        if not isinstance(tree.get(key), str):
            problems.append(f"'carry.tree.{key}' must be a string")
    for key in ("tokens", "cost_usd"):
        value = tree.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            problems.append(f"'carry.tree.{key}' must be a number")
    deadline = tree.get("deadline")
    if deadline is not None:
        try:
            datetime.fromisoformat(str(deadline))
        except ValueError:
            problems.append(f"'carry.tree.deadline' must be an ISO time, got {deadline!r}")
    return problems
