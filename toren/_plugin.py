"""`TorenPlugin`: one Temporal plugin that installs toren on a client, worker or replayer.

```python
client = await Client.connect("localhost:7233", plugins=[TorenPlugin()])
worker = Worker(client, task_queue="support", plugins=[TorenPlugin(runtime)])
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from toren import _storage as storage
from toren.activities._loaded import LoadedAgent
from toren.activities._runtime import AgentRuntime
from toren.errors import RunError
from toren.workflows import AgentRun, AgentThread

__all__ = ["TorenPlugin", "workflow_runner"]

PASSTHROUGH = ("toren", "jsonschema", "referencing", "rpds", "attrs", "attr", "pydantic")
"""Modules the sandbox shares with the worker: pure and deterministic, or toren's own types."""


def workflow_runner(existing: WorkflowRunner | None = None) -> WorkflowRunner:
    """The sandboxed runner `AgentRun` needs: `existing` with toren's modules passed through.

    The sandbox then shares them instead of re-importing them per run. A worker's own runner
    keeps its restrictions; toren only adds its pass-throughs. A runner that is not sandboxed
    needs nothing.
    """
    if existing is None:
        existing = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default)
    if not isinstance(existing, SandboxedWorkflowRunner):
        return existing
    restrictions = existing.restrictions.with_passthrough_modules(*PASSTHROUGH)
    return dataclasses.replace(existing, restrictions=restrictions)


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
        self,
        runtime: AgentRuntime | None = None,
        agents: Sequence[LoadedAgent] | None = None,
        payload_store: str | None = None,
    ) -> None:
        """Create the plugin.

        Args:
            runtime: on a worker, the runtime whose activities to register.
            agents: only these agents' tool activities (default: all of the runtime's).
            payload_store: where payloads over 256 KiB go (`toren._storage`); default the
                `TOREN_PAYLOAD_STORE` variable; empty or unset keeps them in history.
        """
        activities: list[Callable[..., Any]] = runtime.activities(agents) if runtime else []
        super().__init__(
            "toren.TorenPlugin",
            data_converter=storage.data_converter(payload_store),
            workflows=_adding([AgentRun, AgentThread]),
            workflow_runner=workflow_runner,
            activities=_adding(activities) if activities else None,
            workflow_failure_exception_types=_adding([RunError]),
        )
        self._runtime = runtime
        self._agents = agents

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Install toren on a worker, and note which queue serves the agents' tools."""
        config = super().configure_worker(config)
        # Beside the user's workflows the worker still needs toren's runner (a Worker always
        # has one, the default sandbox, so extend it rather than keep it as it is).
        if self._runtime is not None and config.get("task_queue"):
            self._runtime.serve_on(config["task_queue"], self._agents)
        if self._runtime is not None and self._runtime.telemetry.enabled:
            config["interceptors"] = [
                *(config.get("interceptors") or []),
                *self._runtime.telemetry.interceptors(),
            ]
        return config
