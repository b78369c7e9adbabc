"""Built-in tools, declared by name in agent.yaml (`builtin_tools: [...]`, `sandbox: true`).

Each built-in is an ordinary `Tool` with a contract and runs as an activity like any other.
A module per built-in exposes its `tool` (a fixed contract, e.g. `web_search`) or
`tools(config, name) -> list[Tool]` (built from agent.yaml, e.g. the sandbox's); this module
is their registry.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from toren.agent._problems import did_you_mean
from toren.agent._tool import Tool
from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren.agent._config import AgentConfig

__all__ = ["BUILTINS", "builtin_env", "builtin_tools"]

BUILTINS: dict[str, tuple[str, list[str]]] = {
    "web_search": ("toren.worker.tools._web_search", ["TAVILY_API_KEY"]),
    "sql_query": ("toren.worker.tools._sql_query", ["SQL_DATABASE_URL"]),
    "read_attachment": ("toren.worker.tools._read_attachment", []),
    "run_process": ("toren.worker.tools._processes", []),
    "check_run": ("toren.worker.tools._processes", []),
    "ask_human": ("toren.worker.tools._ask_human", []),
}
"""Built-in name → (module with `tool` or `tools(config, name)`, env names it requires)."""

SANDBOX_MODULE = "toren.worker.tools._sandbox"
"""`sandbox: true` adds this module's `tools(config, "sandbox")`: bash plus the file tools."""

_SANDBOX_ONLY = {"bash", "read_file", "write_file", "edit_file"}


def builtin_env(name: str) -> list[str]:
    """Env names the built-in `name` needs (folded into the agent's required env)."""
    entry = BUILTINS.get(name)
    return list(entry[1]) if entry else []


def builtin_tools(config: AgentConfig, path: Path) -> tuple[list[Tool], list[str]]:
    """Build the built-in tools `config` declares; return them and every problem found."""
    tools: list[Tool] = []
    problems: list[str] = []
    wanted: list[tuple[str, str]] = []
    for name in config.builtin_tools:
        if name in _SANDBOX_ONLY:
            problems.append(
                f"{path}: builtin_tools: {name!r} cannot be declared here; set `sandbox: true`, "
                "which grants bash plus the workspace file tools together"
            )
        elif name not in BUILTINS:
            hint = did_you_mean(name, sorted(BUILTINS))
            problems.append(f"{path}: builtin_tools: unknown built-in {name!r}{hint}")
        else:
            wanted.append((name, BUILTINS[name][0]))
    if config.sandbox is not None:
        wanted.append(("sandbox", SANDBOX_MODULE))
    for name, module_name in wanted:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            problems.append(f"{path}: builtin_tools: {name!r} is not available here ({err})")
            continue
        try:
            tools += module.tools(config, name) if hasattr(module, "tools") else [module.tool]
        except ConfigError as err:  # e.g. bash cannot be jailed on this worker
            problems += [f"{path}: {name}: {p}" for p in err.problems]
        except Exception as err:  # a broken built-in: one problem among the others
            problems.append(f"{path}: {name}: {type(err).__name__}: {err}")
    return tools, problems
