"""`TorenPlugin`: one Temporal plugin that installs toren on a client, worker or replayer.

```python
client = await Client.connect("localhost:7233", plugins=[TorenPlugin()])
worker = Worker(client, task_queue="support", plugins=[TorenPlugin(runtime)])
```
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any, Protocol, TypeVar

from google.protobuf.message import Message
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkerConfig, WorkflowInstance, WorkflowRunner
from temporalio.worker import WorkflowInstanceDetails as Details
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from toren.agent._sdk_private import sandbox_runner
from toren.connect._deployment import pinned_by_default, worker_deployment
from toren.connect._team_converter import extend_converter
from toren.errors import RunError
from toren.store._payloads import payload_store_setting
from toren.workflows import AgentRun, AgentThread

__all__ = ["TorenPlugin", "workflow_runner"]

PASSTHROUGH = ("toren", "jsonschema", "referencing", "rpds", "attrs", "attr", "pydantic")
"""Modules the sandbox shares with the worker: pure and deterministic, or toren's own types."""


@functools.lru_cache(maxsize=64)
def _compiled(code: str) -> CodeType:
    return compile(code, "<string>", "exec")


class _CompiledInstance(sandbox_runner._Instance):
    """The SDK's sandboxed instance, compiling each snippet it runs once per worker.

    The sandbox runs every activation, and every payload's serialization-context lookup, as
    `exec` of a short source string (`_Instance._run_code`); compiling that string is ~30 us,
    over 90% of the call, and a workflow task looks contexts up several times per payload
    (about 10% of a busy worker's CPU). The snippets are a handful of constant strings, so
    their code objects are cached; `exec` runs a code object exactly as it runs its source.
    The context lookups themselves skip the sandbox (below).
    """

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]

    def activate(self, act: Any) -> Any:
        """The SDK instance's completion; the instance then lets go of it and of `act`.

        Between two activations the SDK's instance still holds the last completion it built
        and a part of the last activation (`deployment_version_for_current_task`): protobuf
        messages, whose arenas a parked run would keep until its next task (~3 KB a run). Both
        are set afresh at the start of every activation and read only during one, and the
        completion has been handed back by then.
        """
        completion = super().activate(act)
        inner: Any = self.globals_and_locals.get("__temporal_in_sandbox")
        instance: Any = getattr(inner, "instance", None)
        if hasattr(instance, "_current_completion"):
            instance._current_completion = None
        if hasattr(instance, "_deployment_version_for_current_task"):
            instance._deployment_version_for_current_task = None
        started: Any = getattr(instance, "_workflow_input", None)
        if started is not None and not isinstance(started.headers, dict):
            # The run's input keeps its headers, a part of its first activation: detached, the
            # activation goes (see `_detached`).
            started.headers = {k: _detached(v) for k, v in started.headers.items()}
        return completion

    # The SDK asks these for every payload of every activation and completion (several times
    # each); both are lookups of the SDK's own state on its workflow instance (pending commands
    # by sequence number, the run's info), with no workflow code and no import in them. So they
    # are called directly instead of through `_run_code` with the sandbox's importer applied.

    def get_serialization_context(self, command_info: Any) -> Any:
        """The SDK instance's answer (see above)."""
        inner: Any = self.globals_and_locals.get("__temporal_in_sandbox")
        if inner is None:
            return super().get_serialization_context(command_info)
        return inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        """The SDK instance's answer (see above)."""
        inner: Any = self.globals_and_locals.get("__temporal_in_sandbox")
        if inner is None:
            return super().get_external_store_context(command_info)
        return inner.get_external_store_context(command_info)


@dataclasses.dataclass(frozen=True)
class _Runner(SandboxedWorkflowRunner):
    """`SandboxedWorkflowRunner` whose instances cache their compiled snippets."""

    def create_instance(self, det: Details) -> WorkflowInstance:
        """An instance of the sandbox (see `_CompiledInstance`) holding no part of an activation.

        See `_detached`.
        """
        info = dataclasses.replace(
            det.info,
            headers={k: _detached(v) for k, v in det.info.headers.items()},
            raw_memo={k: _detached(v) for k, v in det.info.raw_memo.items()},
        )
        det = dataclasses.replace(
            det,
            info=info,
            last_completion_result=_detached(det.last_completion_result),
            last_failure=None if det.last_failure is None else _detached(det.last_failure),
        )
        return _CompiledInstance(det, self.runner_class, self.restrictions)


class WorkerRuntime(Protocol):
    """What the plugin asks of a worker's runtime (`toren.worker.activities.AgentRuntime`).

    A protocol, so that connecting a client never imports the worker's side.
    """

    @property
    def telemetry(self) -> Any: ...

    def activities(self, agents: Sequence[Any] | None = None) -> list[Callable[..., Any]]: ...

    def serve_on(self, task_queue: str, agents: Sequence[Any] | None = None) -> None: ...


M = TypeVar("M", bound=Message)


def _detached(message: M) -> M:
    """A copy of `message` that is a message of its own.

    A part of a decoded protobuf message keeps the whole message's arena alive: the SDK's
    instance of a run kept a few parts of its first activation (its headers, memo, last
    completion result) and with them all of it, for as long as the run stays cached (~4 KB
    for a parked run). The copies hold the same values.
    """
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def workflow_runner(existing: WorkflowRunner | None = None) -> WorkflowRunner:
    """The sandboxed runner `AgentRun` needs: `existing` with toren's modules passed through.

    The sandbox then shares them instead of re-importing them per run. A worker's own runner
    keeps its restrictions; toren only adds its pass-throughs (and, for the SDK's own runner
    class, caches the compiled code it runs: `_CompiledInstance`). A runner that is not
    sandboxed needs nothing.
    """
    if existing is None:
        existing = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default)
    if not isinstance(existing, SandboxedWorkflowRunner):
        return existing
    restrictions = existing.restrictions.with_passthrough_modules(*PASSTHROUGH)
    runner = dataclasses.replace(existing, restrictions=restrictions)
    if type(existing) is SandboxedWorkflowRunner and hasattr(sandbox_runner._Instance, "_run_code"):
        runner = _Runner(restrictions=restrictions, runner_class=existing.runner_class)
    return runner


T = TypeVar("T")


def _adding(items: Sequence[T]) -> Callable[[Sequence[T] | None], Sequence[T]]:
    # Append once: the plugin may be on both the client and the worker.
    def add(existing: Sequence[T] | None) -> Sequence[T]:
        out = list(existing or [])
        return out + [i for i in items if i not in out]

    return add


class TorenPlugin(SimplePlugin):
    """Installs toren's payload converter, its workflows and (given a runtime) activities.

    The client's data converter is extended, not replaced (`toren.connect._team_converter`): the
    team's payload codec, failure converter and external storage stay, and its own
    workflows keep their payload converter.
    """

    def __init__(
        self,
        runtime: WorkerRuntime | None = None,
        agents: Sequence[Any] | None = None,
        payload_store: str | None = None,
        deployment: str | None = None,
        build_id: str | None = None,
    ) -> None:
        """Create the plugin.

        Args:
            runtime: on a worker, the runtime whose activities to register.
            agents: only these agents' tool activities (default: all of the runtime's).
            payload_store: where payloads over 256 KiB go (`toren.store._payloads`) when the
                client's converter has no external storage of its own; default the
                `TOREN_PAYLOAD_STORE` variable; empty or unset keeps them in history.
            deployment: on a worker, serve as a version of this Worker Deployment (with
                `build_id`; `toren.connect._deployment`) unless the worker's own
                `deployment_config` says otherwise. A versioned worker's default behavior
                becomes PINNED when left unspecified (toren's workflows need it; your own
                may declare their own `versioning_behavior`).
            build_id: the version's build id.
        """
        self._deployment = worker_deployment(deployment, build_id, environ={})
        activities: list[Callable[..., Any]] = runtime.activities(agents) if runtime else []
        self._payload_store = payload_store_setting() if payload_store is None else payload_store
        super().__init__(
            "toren.TorenPlugin",
            data_converter=self.converter,
            workflows=_adding([AgentRun, AgentThread]),
            workflow_runner=workflow_runner,
            activities=_adding(activities) if activities else None,
            workflow_failure_exception_types=_adding([RunError]),
        )
        self._runtime = runtime
        self._agents = agents

    def converter(self, existing: DataConverter | None = None) -> DataConverter:
        """`existing` (default: the SDK's) extended with toren's payload converter and store.

        For a `Replayer` or a test that builds its own client: `data_converter=plugin.converter()`.
        """
        return extend_converter(existing, self._payload_store)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Install toren on a worker, and note which queue serves the agents' tools."""
        config = super().configure_worker(config)
        if self._deployment is not None and config.get("deployment_config") is None:
            config["deployment_config"] = self._deployment
        versioning = config.get("deployment_config")
        if versioning is not None:
            # A versioned worker pins toren's runs and threads (see `pinned_by_default`).
            config["deployment_config"] = pinned_by_default(versioning)
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
