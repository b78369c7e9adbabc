"""Built-in tools, declared by name in agent.yaml (`builtin_tools: [...]`, `sandbox: true`).

Each built-in is an ordinary `Tool` with a contract; this module is their registry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from toren.tool import Tool

if TYPE_CHECKING:
    from toren.agent import AgentConfig

__all__ = ["BUILTINS", "builtin_env", "builtin_tools"]

BuiltinFactory = Callable[["AgentConfig"], list[Tool]]

BUILTINS: dict[str, tuple[BuiltinFactory, list[str]]] = {}
"""Built-in name → (factory building its tools for an agent, env names it requires)."""

_SANDBOX_ONLY = {"bash", "read_file", "write_file", "edit_file"}


def builtin_env(name: str) -> list[str]:
    """Env names the built-in `name` needs (folded into the agent's required env)."""
    entry = BUILTINS.get(name)
    return list(entry[1]) if entry else []


def builtin_tools(config: AgentConfig, path: Path) -> tuple[list[Tool], list[str]]:
    """Build the built-in tools `config` declares; return them and every problem found."""
    tools: list[Tool] = []
    problems: list[str] = []
    for name in config.builtin_tools:
        if name in _SANDBOX_ONLY:
            problems.append(
                f"{path}: builtin_tools: {name!r} cannot be declared here; set `sandbox: true`, "
                "which grants bash plus the workspace file tools together"
            )
        elif name not in BUILTINS:
            known = ", ".join(sorted(BUILTINS)) or "none yet"
            problems.append(f"{path}: builtin_tools: unknown built-in {name!r} (known: {known})")
        else:
            tools += BUILTINS[name][0](config)
    return tools, problems
