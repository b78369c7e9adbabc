"""agent.yaml `sandbox:`: whether bash and the workspace file tools are granted, and their limits.

Re-exported by `toren.agent._config`, which checks the block's `env` against the agent's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator

from toren.agent._config_blocks import Strict, env_name_problem
from toren.agent._problems import problems_at

__all__ = ["SANDBOX_RESERVED_ENV", "SandboxConfig", "SandboxLimits", "sandbox_env_problem"]

SANDBOX_RESERVED_ENV = ("HOME", "LANG", "PATH", "TOREN_IDEMPOTENCY_KEY")
"""Names the sandbox sets itself; `sandbox.env` may not pass them in."""


class SandboxLimits(Strict):
    """The `sandbox.limits` block: what one bash call (or `ctx.run_code`) may use.

    Enforced with rlimits set inside the sandbox before the command starts (see
    `toren.worker.tools._sandbox._jail`); `toren check` says which are in force on a worker.
    """

    memory_mb: int = Field(1024, alias="memoryMB", ge=16, le=1_048_576)
    """MB of private writable memory per process (`RLIMIT_DATA`); also the size of `/tmp`."""
    cpu_seconds: int = Field(60, alias="cpuSeconds", ge=1, le=86_400)
    """CPU seconds per process (`RLIMIT_CPU`); the call's `timeout_seconds` bounds wall time."""
    processes: int = Field(256, ge=8, le=1_000_000)
    """Processes and threads alive at once in one call (`RLIMIT_NPROC`, or polled as root)."""
    file_size_mb: int = Field(512, alias="fileSizeMB", ge=1, le=1_048_576)
    """MB of the largest file a process may write (`RLIMIT_FSIZE`)."""
    workspace_mb: int = Field(1024, alias="workspaceMB", ge=1, le=1_048_576)
    """MB the run's workspace may grow to; checked during and after each call."""


class SandboxConfig(Strict):
    """The `sandbox:` block: `true` means all defaults, `false` (the default) no sandbox.

    Its `env` names are checked against the agent's `env` by `AgentConfig`.
    """

    network: StrictBool = False
    """Share the worker's network; otherwise the sandbox has only its own loopback."""
    approval: Literal["always", "never"] = "always"
    """bash's approval policy (the file tools never ask)."""
    env: list[str] = Field(default_factory=list)
    """Declared env names whose values are passed into the sandbox."""
    unconfined: StrictBool = False
    """The agent accepts running bash without bwrap if the operator also allows it."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)  # type: ignore[arg-type]
    """What one call may use: memory, CPU, processes, file and workspace size."""

    @field_validator("env")
    @classmethod
    def _passable(cls, names: list[str]) -> list[str]:
        problems = [p for p in map(sandbox_env_problem, names) if p]
        if problems:
            raise problems_at(None, problems, names)
        return names


def sandbox_env_problem(name: str) -> str | None:
    """Why `name` cannot pass into the sandbox (not a variable name, or one it sets), or None."""
    problem = env_name_problem(name)
    if problem:
        return problem
    if name in SANDBOX_RESERVED_ENV:
        return f"{name!r} is set by the sandbox itself; remove it"
    return None
