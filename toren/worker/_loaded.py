"""An agent ready to serve on a worker: its folder, resolved env, model provider and spec."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from toren.agent._handoff_config import HANDOFF_PREFIX
from toren.agent._spec import AgentSpec
from toren.worker._agent import PROVIDER_SETTINGS, Agent
from toren.worker._digest import folder_hash, spec_digest
from toren.worker._redact import Redactor, redactor
from toren.worker.models import ModelProvider
from toren.worker.models._window import window_of

__all__ = ["CREDENTIAL_VARIABLES", "LoadedAgent", "worker_secrets"]

_PLAIN = re.compile(r"[+-]?\d+(\.\d+)?|true|false|yes|no|on|off", re.IGNORECASE)
"""Optional env values that are obviously not secret: numbers and yes/no words."""

CREDENTIAL_VARIABLES = (
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "TOREN_WEB_TOKENS",
    "TEMPORAL_CODEC_AUTH",
)
"""Credentials a worker's own environment may hold, whichever agent it serves."""
_CREDENTIAL_NAME = re.compile(
    r"(^|_)([A-Z0-9]*KEY|KEY_DATA|TOKENS?|SECRETS?|PASSWORD|PASSWD|CREDENTIALS?)$"
)
"""Any other variable named like a credential (`OPENAI_API_KEY`, `GITHUB_TOKEN`, ...)."""

NAMED_ONLY_MIN_CHARS = 8
"""A value found by its variable's name alone is hidden from 8 characters on: an undeclared
`POSTGRES_PASSWORD=test` or `REDIS_PASSWORD=redis` of a dev box would otherwise turn those
words into markers in every result of every agent (declared secrets keep the redactor's own
minimum)."""


def _looks_secret(value: str) -> bool:
    """A credential-named variable's value worth hiding: long enough, and no file path."""
    return len(value) >= NAMED_ONLY_MIN_CHARS and not value.startswith(("/", "./", "~/"))


@dataclass
class LoadedAgent:
    """An agent ready to serve: its folder, resolved env and model provider."""

    agent: Agent
    env: dict[str, str]
    provider: ModelProvider
    model: str
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    prices: tuple[float, ...] | None = None
    """USD per million input, output (and cache-read, cache-write) tokens of the model
    (agent.yaml, or the table)."""
    worker_secrets: tuple[str, ...] = ()
    """Every secret the worker holds (`worker_secrets`): any run's redactor hides them all, since
    a tool or an MCP server may find one it was never given."""

    @cached_property
    def files(self) -> str:
        """A hash of the agent folder's files as loaded (`toren.worker._digest`)."""
        return folder_hash(self.agent.folder)

    def spec(self, search_attributes: Sequence[str] = ()) -> AgentSpec:
        """The spec the workflow records once per run, named by its digest."""
        spec = self._spec(search_attributes)
        return replace(spec, digest=spec_digest(spec, self.files))

    def _spec(self, search_attributes: Sequence[str]) -> AgentSpec:
        limits = self.agent.config.limits
        return AgentSpec(
            name=self.agent.name,
            model=self.model,
            tools=[t.spec(self.agent.tools) for t in self.agent.tools.values()],
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
            # The model's window, when agent.yaml does not say: the table of known models.
            context=self.agent.config.context.recorded(window_of(self.model)),
            search_attributes=list(search_attributes),
            processes=self.processes,
            continue_after_events=limits.continue_as_new_after_events,
            continue_after_bytes=(
                int(limits.continue_as_new_after_mb * 1_000_000)
                if limits.continue_as_new_after_mb
                else None
            ),
            output_schema=self.agent.output_schema,
            output_name=self.agent.output_name,
            max_output_retries=limits.max_output_retries,
            handoffs={f"{HANDOFF_PREFIX}{name}": name for name in self.agent.config.handoffs},
            agents=self.agent.agent_tools,
            max_parallel_agents=limits.max_parallel_agents,
        )

    def secrets(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Values to keep out of history, by name (short ones included; see `toren.worker._redact`).

        The required env (keys, passwords, tokens); the optional env the worker's environment
        set, unless it is the default agent.yaml already shows or a number or yes/no word; every
        value an MCP server gets (`mcp_servers`: headers and stdio env); and
        the `secret` variables of every tool of the agent, since a tool may invoke another.
        """
        environ = os.environ if environ is None else environ
        # A provider's region, project or API version is no secret unless the agent says so.
        declared = {*self.agent.config.env.required, *self.agent.config.env.optional}
        settings = PROVIDER_SETTINGS - declared
        found = {
            n: self.env[n]
            for n in self.agent.required_env()
            if self.env.get(n) and n not in settings
        }
        defaults = self.agent.config.env.optional
        for name, value in self.env.items():
            if name in found or name in settings or not value or value == defaults.get(name):
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

    def secret_values(self) -> list[str]:
        """Every value this agent's redactor hides: its own secrets and the worker's."""
        return [*self.secrets().values(), *self.worker_secrets]

    def redactor(self) -> Redactor:
        """The redactor every value this agent's calls send to Temporal goes through."""
        return redactor(self.secret_values())


def worker_secrets(agents: Sequence[LoadedAgent], environ: Mapping[str, str]) -> tuple[str, ...]:
    """Every secret a worker serving `agents` holds.

    Each agent's own (`LoadedAgent.secrets`), and the credentials in the worker's environment
    (`environ` over `os.environ`): `CREDENTIAL_VARIABLES`, any variable named like a credential,
    the password of any URL, and each token of `TOREN_WEB_TOKENS` (`token:agent|agent,...`).
    """
    found = {v for a in agents for v in a.secrets(environ).values() if v}
    for name, value in {**os.environ, **environ}.items():
        if not value or _PLAIN.fullmatch(value.strip()):
            continue
        upper = name.upper()
        if upper in CREDENTIAL_VARIABLES or (
            _CREDENTIAL_NAME.search(upper) and _looks_secret(value.strip())
        ):
            found.add(value)
        if "://" in value:
            with contextlib.suppress(ValueError):
                password = urlsplit(value.strip()).password
                if password:
                    found.add(value)
        if upper == "TOREN_WEB_TOKENS":
            found |= {e.strip().partition(":")[0] for e in value.split(",") if e.strip()}
    return tuple(sorted(v for v in found if v))
