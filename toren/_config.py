"""agent.yaml as one pydantic model: what a folder may declare, with a newcomer's defaults."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AgentConfig", "EnvConfig", "Limits"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Limits(_Strict):
    """Run-level budgets."""

    max_steps_per_task: int = Field(50, alias="maxStepsPerTask", ge=1)
    """Model turns before the run fails with a budget error."""
    max_attempts_per_task: int | None = Field(None, alias="maxAttemptsPerTask", ge=1)
    """Default `max_attempts` for tools that declare none; `None`: at-least-once."""
    max_wall_clock_min: float | None = Field(None, alias="maxWallClockMin", gt=0)
    """Minutes before a workflow timer ends the run with a budget error; `None`: no limit."""
    approval_timeout_min: float | None = Field(None, alias="approvalTimeoutMin", gt=0)
    """Default minutes a gated call waits before it is denied; `None`: wait forever."""
    continue_as_new_after_events: int | None = Field(None, alias="continueAsNewAfterEvents", ge=100)
    """Continue as new past this many history events (always when Temporal suggests it)."""
    continue_as_new_after_mb: float | None = Field(None, alias="continueAsNewAfterMB", gt=0)
    """Continue as new past this much history, in MB (always when Temporal suggests it)."""


class EnvConfig(_Strict):
    """The env a handler may read through `ctx.env`."""

    required: list[str] = Field(default_factory=list)
    """Names that must be set in the worker's environment."""
    optional: dict[str, str] = Field(default_factory=dict)
    """Names that may be set, with the default used when they are not."""


class AgentConfig(_Strict):
    """The contents of agent.yaml."""

    name: str
    """The agent's name, `[a-z][a-z0-9_]*`; prefixes its tool activity types."""
    model: str
    """`openai/<model>`, `anthropic/<model>` or `mock/<name>`."""
    description: str = ""
    """One line for people; not sent to the model."""
    instructions: str = "instructions.md"
    """The system prompt's file, relative to agent.yaml."""
    max_tokens: int = Field(4096, alias="maxTokens", ge=1)
    """Upper bound on tokens per model response."""
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    """Run budgets."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Env names the tools may read."""
    builtin_tools: list[str] = Field(default_factory=list)
    """Built-in tools to add, by name."""
    sandbox: bool | dict[str, Any] = False
    """Grant bash and the workspace file tools (`true`, or a block of options)."""
    processes: dict[str, Any] = Field(default_factory=dict)
    """Named processes `run_process` may start."""
    task_queue: str | None = None
    """The Temporal task queue; defaults to the agent's name."""
