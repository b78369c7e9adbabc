"""The worker-side runtime: loaded agents, their env and providers, and the activities.

```python
runtime = AgentRuntime.load(["examples/support"], environ=os.environ)
worker = Worker(client, task_queue="support", activities=runtime.activities(), ...)
```

Loading and registration live here, with `toren.agent_spec` (the local activity that records
an agent's spec in each run); the model call is `_model_call`'s, the tool calls and approval
predicates `_tool_activities`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from toren.agent._spec import AgentSpec
from toren.errors import ConfigError
from toren.worker._agent import Agent, load_agent, process_specs
from toren.worker._handoffs import HandoffFollower
from toren.worker._loaded import LoadedAgent, worker_secrets
from toren.worker._prices import prices_for
from toren.worker._redact import MIN_SECRET_CHARS
from toren.worker.activities._model_call import ModelCalls
from toren.worker.activities._tool_activities import ToolActivities
from toren.worker.activities._tool_call import missing_variables
from toren.worker.activities._transcripts import keep_transcript
from toren.worker.models import ModelProvider, provider_for
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["AgentRuntime"]

log = logging.getLogger("toren")


class AgentRuntime(ModelCalls, ToolActivities):
    """Everything a worker needs to serve some agents: build it with `AgentRuntime.load`."""

    def serve_on(self, task_queue: str, agents: Sequence[LoadedAgent] | None = None) -> None:
        """Note that a worker on `task_queue` registers `agents`' tools (default: all)."""
        for a in agents or self.agents.values():
            self.queues.setdefault(a.agent.name, set()).add(task_queue)

    @classmethod
    def load(
        cls,
        folders: Sequence[str | Path | Agent],
        environ: Mapping[str, str],
        models: Mapping[str, ModelProvider] | None = None,
        model_override: str | None = None,
    ) -> AgentRuntime:
        """Load agent folders and resolve their env from `environ`.

        Args:
            folders: agent folders (or already loaded agents).
            environ: where env values come from, normally `os.environ`.
            models: providers by model string (`"mock/x"`), overriding the built-in ones.
            model_override: serve every agent with this model instead of its own.

        Raises:
            ConfigError: every problem of every agent, missing env included, in one error.
        """
        problems: list[str] = []
        loaded: list[LoadedAgent] = []
        follow = HandoffFollower(folders)  # handoff targets are served too, each folder once
        for folder in follow:
            try:
                agent = follow.loaded(folder if isinstance(folder, Agent) else load_agent(folder))
                model = model_override or agent.config.model
                if model_override:
                    agent.config = agent.config.model_copy(update={"model": model})
                # Reported with the agent's other problems (a missing key, say), all at once.
                problems += hosted_tool_problems(
                    agent.name, model, agent.tools.values(), agent.config.model_settings.api
                )
                env = agent.resolve_env(environ)
                for tool in agent.tools.values():
                    absent = missing_variables(tool, environ)
                    if absent:
                        log.warning(
                            "tool %s.%s needs variable(s) %s, missing here: its calls will "
                            "fail until they are set",
                            agent.name,
                            tool.name,
                            ", ".join(absent),
                        )
                provider = (models or {}).get(model) or provider_for(model, env, agent.folder)
                processes = process_specs(agent.config, agent.folder)
                limits = agent.config.limits
                configured = limits.prices
                prices = prices_for(
                    model,
                    {"input": configured.input_per_mtok, "output": configured.output_per_mtok}
                    if configured
                    else None,
                )
                if limits.max_cost_usd is not None and prices is None:
                    problems.append(
                        f"{agent.folder / 'agent.yaml'}: limits.maxCostUSD needs the price of "
                        f"model {model!r}, which the price table does not know: set "
                        "limits.prices: {inputPerMTok: ..., outputPerMTok: ...} (USD per "
                        "million tokens)"
                    )
                ready = LoadedAgent(
                    agent=agent,
                    env=env,
                    provider=provider,
                    model=model,
                    processes=processes,
                    prices=prices,
                )
                _warn_short_secrets(ready, environ)
                _ = ready.files  # the digest names the folder as loaded, not as later edited
                loaded.append(ready)
            except ConfigError as err:
                problems += err.problems
        names = [a.agent.name for a in loaded]
        for name in {n for n in names if names.count(n) > 1}:
            problems.append(f"two agent folders are both named {name!r}")
        if problems:
            raise ConfigError(problems)
        held = worker_secrets(loaded, environ)
        for ready in loaded:
            ready.worker_secrets = held
        runtime = cls(loaded)
        runtime.handoffs, runtime.companions = follow.targets, follow.companions
        return runtime

    def task_queues(self) -> dict[str, list[LoadedAgent]]:
        """Agents grouped by task queue (one Temporal worker serves each queue)."""
        queues: dict[str, list[LoadedAgent]] = {}
        for a in self.agents.values():
            if a.agent.name not in self.companions:
                queues.setdefault(a.agent.task_queue, []).append(a)
        return {q: self.with_handoff_targets(agents) for q, agents in queues.items()}

    def with_handoff_targets(self, agents: Sequence[LoadedAgent]) -> list[LoadedAgent]:
        """`agents` and every agent they hand off to, however far (a thread stays on its queue)."""
        found = {a.agent.name: a for a in agents}
        names = list(found)
        for name in names:
            for target in self.handoffs.get(name, []):
                if target not in found and target in self.agents:
                    found[target] = self.agents[target]
                    names.append(target)
        return list(found.values())

    def activities(self, agents: Sequence[LoadedAgent] | None = None) -> list[Callable[..., Any]]:
        """The activities serving `agents` (default: all): the loop's own and one per tool."""
        served = list(agents or self.agents.values())
        acts: list[Callable[..., Any]] = [
            self.agent_spec, self.check_approval, self.call_model, self.compact_context,
            keep_transcript,
        ]  # fmt: skip
        for a in served:
            for tool in a.agent.tools.values():
                # The workflow runs native tools; the model's provider runs provider tools.
                if not tool.native and tool.execution_mode == "local":
                    acts.append(self._tool_activity(a, tool))
        if any(a.agent.config.mcp_servers for a in served):
            acts.append(self._late_tool_activity())
        return acts

    @activity.defn(name="toren.agent_spec")
    async def agent_spec(self, agent: str) -> AgentSpec:
        """Record the agent's spec (schemas and policies) in the run's history.

        Refuses a run on a task queue where no worker of this runtime registers the agent's
        tools: its first tool call would retry "activity not registered" forever.
        """
        loaded = self._get(agent)
        queue = activity.info().task_queue
        served = self.queues.get(agent)
        if served and queue not in served:
            where = ", ".join(repr(q) for q in sorted(served))
            raise ApplicationError(
                f"agent {agent!r} is served on task queue {where}, not {queue!r}: this worker "
                f"runs AgentRun on {queue!r} but registers {agent!r}'s tools only there; start "
                f"the run with task_queue={sorted(served)[0]!r} (toren run and "
                "toren.client.start_run take it from agent.yaml), or serve the agent on "
                f"{queue!r} too",
                type="WrongTaskQueue",
                non_retryable=True,
            )
        if self.mcp is not None:
            await self.mcp.refresh(agent)
        return loaded.spec(self.search_attributes)


def _warn_short_secrets(loaded: LoadedAgent, environ: Mapping[str, str]) -> None:
    declared = set(loaded.agent.required_env()) | {
        v.name for t in loaded.agent.tools.values() for v in t.variables if v.type == "secret"
    }
    short = sorted(
        n
        for n, value in loaded.secrets(environ).items()
        if n in declared and len(value) < MIN_SECRET_CHARS
    )
    if short:
        log.warning(
            "agent %s: %s %s shorter than %d characters, too short to redact: it may appear "
            "in history",
            loaded.agent.name,
            ", ".join(short),
            "is" if len(short) == 1 else "are",
            MIN_SECRET_CHARS,
        )
