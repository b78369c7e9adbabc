"""An agent ready to serve on a worker: its folder, resolved env, model provider and spec."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toren._agent import Agent
from toren._redact import Redactor, redactor
from toren._types import AgentSpec, ToolSpec
from toren.models import ModelProvider

__all__ = ["LoadedAgent"]

_PLAIN = re.compile(r"[+-]?\d+(\.\d+)?|true|false|yes|no|on|off", re.IGNORECASE)
"""Optional env values that are obviously not secret: numbers and yes/no words."""


@dataclass
class LoadedAgent:
    """An agent ready to serve: its folder, resolved env and model provider."""

    agent: Agent
    env: dict[str, str]
    provider: ModelProvider
    model: str
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    prices: tuple[float, float] | None = None
    """USD per million input and output tokens of the model (agent.yaml, or the table)."""

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
                    execution_mode=t.execution_mode,
                    execution_provider=t.execution_provider,
                    progress_argument=t.progress_argument,
                    annotations=t.annotations or None,
                    workspace=t.in_workspace
                    or any(u.in_workspace for u in map(self.agent.tools.get, t.uses) if u),
                )
                for t in self.agent.tools.values()
            ],
            max_steps=limits.max_steps_per_task,
            max_attempts=limits.max_attempts_per_task,
            max_wall_clock_min=limits.max_wall_clock_min,
            thread_idle_timeout_min=limits.thread_idle_timeout_min,
            max_tokens_budget=limits.max_tokens,
            max_cost_usd=limits.max_cost_usd,
            prices=list(self.prices) if self.prices else None,
            approval_timeout_s=(
                limits.approval_timeout_min * 60 if limits.approval_timeout_min else None
            ),
            max_tokens=self.agent.config.max_tokens,
            model_retry=self.agent.config.model_retry.policy(),
            heartbeat_timeout_s=self.agent.config.heartbeat_timeout_s,
            search_attributes=list(search_attributes),
            processes=self.processes,
            continue_after_events=limits.continue_as_new_after_events,
            continue_after_bytes=(
                int(limits.continue_as_new_after_mb * 1_000_000)
                if limits.continue_as_new_after_mb
                else None
            ),
        )

    def secrets(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Values to keep out of history, by name (short ones included; see `toren._redact`).

        The required env (keys, passwords, tokens); the optional env the worker's environment
        set, unless it is the default agent.yaml already shows or a number or yes/no word; every
        value an MCP server gets (`mcp_servers`: headers and stdio env); and
        the `secret` variables of every tool of the agent, since a tool may invoke another.
        """
        environ = os.environ if environ is None else environ
        found = {n: self.env[n] for n in self.agent.required_env() if self.env.get(n)}
        defaults = self.agent.config.env.optional
        for name, value in self.env.items():
            if name in found or not value or value == defaults.get(name):
                continue
            if not _PLAIN.fullmatch(value.strip()):
                found[name] = value
        # What an MCP server gets (a header's token, a stdio server's env) is secret, whatever
        # it looks like: it is a credential to another system.
        for server in self.agent.config.mcp_servers.values():
            found.update({n: self.env[n] for n in server.env_used() if self.env.get(n)})
        for tool in self.agent.tools.values():
            for var in tool.variables:
                if var.type == "secret" and environ.get(var.name):
                    found[var.name] = environ[var.name]
        return found

    def redactor(self) -> Redactor:
        """The redactor every value this agent's calls send to Temporal goes through."""
        return redactor(self.secrets().values())
