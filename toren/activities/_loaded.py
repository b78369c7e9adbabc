"""An agent ready to serve on a worker: its folder, resolved env, model provider and spec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toren._agent import Agent
from toren._types import AgentSpec, ToolSpec
from toren.models import ModelProvider

__all__ = ["LoadedAgent"]


@dataclass
class LoadedAgent:
    """An agent ready to serve: its folder, resolved env and model provider."""

    agent: Agent
    env: dict[str, str]
    provider: ModelProvider
    model: str
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def spec(self, search_attributes: Sequence[str] = ()) -> AgentSpec:
        """The spec the workflow records once per run."""
        limits = self.agent.config.limits
        return AgentSpec(
            name=self.agent.name,
            model=self.model,
            tools=[
                ToolSpec(
                    name=t.name or "",
                    description=t.description,
                    schema=t.schema,
                    effects=t.effects,
                    idempotency=t.idempotency,
                    approval=t.approval_kind,
                    timeout_ms=t.timeout_ms,
                    max_attempts=t.max_attempts,
                    approval_timeout_s=t.approval_timeout_s,
                    native=t.native,
                )
                for t in self.agent.tools.values()
            ],
            max_steps=limits.max_steps_per_task,
            max_attempts=limits.max_attempts_per_task,
            max_wall_clock_min=limits.max_wall_clock_min,
            approval_timeout_s=(
                limits.approval_timeout_min * 60 if limits.approval_timeout_min else None
            ),
            max_tokens=self.agent.config.max_tokens,
            model_retry=self.agent.config.model_retry.policy(),
            search_attributes=list(search_attributes),
            processes=self.processes,
            continue_after_events=limits.continue_as_new_after_events,
            continue_after_bytes=(
                int(limits.continue_as_new_after_mb * 1_000_000)
                if limits.continue_as_new_after_mb
                else None
            ),
        )

    def secrets(self) -> list[str]:
        """Values to keep out of history: the required env (keys, passwords, tokens)."""
        return [self.env[n] for n in self.agent.required_env() if len(self.env.get(n, "")) >= 4]
