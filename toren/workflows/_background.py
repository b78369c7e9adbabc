"""Background runs inside `AgentRun`: `run_process` starts a child workflow, `check_run` polls.

Both run in the workflow itself (starting a child is a workflow command). What they know lives
in the run's `RunState` (`children`, and `notices` for the model's next step), so it crosses
continue-as-new like everything else; only the watchers of running children stay in this run,
which is why a run does not continue as new while a child runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import ToolSpec
    from toren.agent._types import RunInput, RunState

__all__ = ["CHILD_OUTPUT_CHARS", "Background", "count_failed_child"]

CHILD_OUTPUT_CHARS = 4000
"""A background run's output as `check_run` returns it (and tells the parent) is cut to this."""


class Background:
    """The background runs one run started, and the notices their ends leave for the model."""

    def __init__(
        self, run: RunState, on_usage: Callable[[dict[str, Any], float | None], None]
    ) -> None:
        self._run = run
        self._on_usage = on_usage
        """Counts a finished child's usage and cost into this run's budget."""
        self.on_usage = on_usage
        """The same, for agent tools' children (`toren.workflows._agent_tools`)."""
        self._watchers: list[asyncio.Future[None]] = []

    def running(self) -> bool:
        """Whether a child still runs (its result can only reach this run)."""
        return any(c["status"] == "running" for c in self._run.children.values())

    async def run_native(
        self, tool: ToolSpec, use_id: str, args: dict[str, Any]
    ) -> tuple[str, bool]:
        """Run `check_run` or `run_process`; return the result text and whether it failed."""
        children = self._run.children
        if tool.native == "check_run":
            run_id = str(args.get("run_id", ""))
            child = children.get(run_id)
            if child is None:
                known = ", ".join(children) or "none"
                return f"unknown run_id {run_id!r} (this run started: {known})", True
            return json.dumps({"run_id": run_id, **child}), False
        assert self._run.spec is not None
        processes = self._run.spec.processes
        name = str(args.get("process", ""))
        process = processes.get(name)
        if process is None:
            return f"unknown process {name!r} (known: {', '.join(processes)})", True
        child_id = f"{workflow.info().workflow_id}/{name}/{use_id}"
        if child_id in children:
            return json.dumps({"run_id": child_id, "process": name, "started": False}), False
        text = str(args.get("input", ""))
        child_input: Any = (
            RunInput(agent=process["agent"], prompt=text)
            if process["workflow"] == "AgentRun"
            else text
        )
        try:
            handle = await workflow.start_child_workflow(
                process["workflow"],
                child_input,
                id=child_id,
                task_queue=process["task_queue"],
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"{name}: {text.splitlines()[0][:100] if text else ''}",
            )
        except WorkflowAlreadyStartedError:
            # Started before (e.g. by an earlier run of this chain): the same child, not a new one.
            children[child_id] = {"process": name, "status": "running"}
            return json.dumps({"run_id": child_id, "process": name, "started": False}), False
        children[child_id] = {"process": name, "status": "running"}
        self._watchers.append(asyncio.ensure_future(self._watch(child_id, name, handle)))
        return json.dumps({"run_id": child_id, "process": name, "started": True}), False

    async def _watch(self, child_id: str, name: str, handle: Any) -> None:
        try:
            result = await handle
        except ChildWorkflowError as err:
            count_failed_child(err, self._on_usage)
            error = str(err.cause or err)[:CHILD_OUTPUT_CHARS]
            self._run.children[child_id] = {"process": name, "status": "failed", "error": error}
            note = f"Background run {child_id} ({name}) failed: {error}"
        else:
            if isinstance(result, dict) and isinstance(result.get("usage"), dict):
                self._on_usage(result["usage"], result.get("cost_usd"))
            output = result.get("text") if isinstance(result, dict) and "text" in result else result
            text = output if isinstance(output, str) else json.dumps(output, default=str)
            text = text[:CHILD_OUTPUT_CHARS]
            self._run.children[child_id] = {
                "process": name,
                "status": "completed",
                "output": text,
            }
            note = f"Background run {child_id} ({name}) completed. Output:\n{text}"
        self._run.notices.append({"role": "user", "content": note})


def count_failed_child(
    err: ChildWorkflowError, on_usage: Callable[[dict[str, Any], float | None], None]
) -> None:
    """Count a failed child run's usage: its `RunError` carries the receipt as its details."""
    cause = err.cause
    receipt = cause.details[0] if isinstance(cause, ApplicationError) and cause.details else None
    if isinstance(receipt, dict):
        on_usage(receipt.get("usage") or {}, receipt.get("cost_usd"))
