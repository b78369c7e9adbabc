"""`TorenPlugin`: one Temporal plugin that installs toren on a client, worker or replayer.

```python
client = await Client.connect("localhost:7233", plugins=[TorenPlugin()])
worker = Worker(client, task_queue="support", plugins=[TorenPlugin(runtime)])
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from toren.activities.runtime import AgentRuntime, LoadedAgent
from toren.errors import RunError
from toren.workflows import AgentRun

__all__ = ["TorenPlugin", "workflow_runner"]

PASSTHROUGH = ("toren", "jsonschema", "referencing", "rpds", "attrs", "attr", "pydantic")
"""Modules the sandbox shares with the worker: pure and deterministic, or toren's own types."""


def workflow_runner() -> WorkflowRunner:
    """The sandboxed runner `AgentRun` needs (jsonschema is passed through, not re-imported)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


T = TypeVar("T")


def _adding(items: Sequence[T]) -> Callable[[Sequence[T] | None], Sequence[T]]:
    # Append once: the plugin may be on both the client and the worker.
    def add(existing: Sequence[T] | None) -> Sequence[T]:
        out = list(existing or [])
        return out + [i for i in items if i not in out]

    return add


class TorenPlugin(SimplePlugin):
    """Installs the data converter, the `AgentRun` workflow and (given a runtime) activities."""

    def __init__(
        self, runtime: AgentRuntime | None = None, agents: Sequence[LoadedAgent] | None = None
    ) -> None:
        """Create the plugin.

        Args:
            runtime: on a worker, the runtime whose activities to register.
            agents: only these agents' tool activities (default: all of the runtime's).
        """
        activities: list[Callable[..., Any]] = runtime.activities(agents) if runtime else []
        super().__init__(
            "toren.TorenPlugin",
            data_converter=pydantic_data_converter,
            workflows=_adding([AgentRun]),
            workflow_runner=lambda existing: existing or workflow_runner(),
            activities=_adding(activities) if activities else None,
            workflow_failure_exception_types=_adding([RunError]),
        )
