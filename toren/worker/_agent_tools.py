"""Agents as tools: agent.yaml `agents:` entries, their child folders loaded and checked.

```yaml
# agent.yaml
agents:
  ask_billing:                      # the tool's name, as the model sees it
    agent: ../billing               # an agent folder, relative to agent.yaml
    description: Ask the billing specialist a question.
limits:
  maxParallelAgents: 4              # agent tools of one turn running at once
```

Each entry becomes a tool of that name taking `{"prompt": "..."}`; a call runs the child agent
as a child `AgentRun` and returns its final answer (`toren.workflows._agent_tools`). The tool runs
inside the workflow (starting a child is a workflow command): it is `native` (`agent:<tool>`) in
the recorded spec and never becomes an activity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toren.agent._context import ToolContext
from toren.agent._define import define_tool
from toren.agent._tool import Tool
from toren.errors import ConfigError

if TYPE_CHECKING:
    from toren.agent._config import AgentConfig

__all__ = ["AGENT_TOOL_INPUT", "agent_tools"]

AGENT_TOOL_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string",
            "minLength": 1,
            "description": "What to ask the agent: the whole question, with what it needs to know",
        }
    },
    "required": ["prompt"],
    "additionalProperties": False,
}
"""What the model passes an agent tool."""


def _native(args: Any, ctx: ToolContext) -> str:
    # Never called: the workflow runs the child itself.
    raise RuntimeError(f"{ctx.tool} runs inside the workflow, not as an activity")


def agent_tools(
    config: AgentConfig, folder: Path, tools: dict[str, Tool], load: Callable[..., Any]
) -> tuple[dict[str, Tool], dict[str, dict[str, Any]], list[str]]:
    """The `agents:` entries as tools, their spec entries, and every problem found.

    Each child folder is loaded (without its own `agents:` children, so a cycle of agents that
    ask each other loads); its problems are reported under `agents.<name>.agent`. A tool name
    that another tool of the agent (its own, a built-in) already has is a problem naming both.
    `load`: `toren.worker._agent.load_agent`.
    """
    where = folder / "agent.yaml"
    found: dict[str, Tool] = {}
    specs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for name, entry in config.agents.items():
        key = f"{where}: agents.{name}"
        if name in tools:
            problems.append(
                f"{key}: the tool name {name!r} is also the agent's tool "
                f"{tools[name].source or name!r}; rename one"
            )
            continue
        child_folder = (folder / entry.agent).resolve()
        if not (child_folder / "agent.yaml").is_file():
            problems.append(
                f"{key}.agent: no agent folder at {entry.agent!r} ({child_folder} has no "
                "agent.yaml); give a folder relative to this agent.yaml"
            )
            continue
        try:
            child = load(child_folder, children=False)
        except ConfigError as err:
            problems += [f"{key}.agent: {p}" for p in err.problems]
            continue
        tool = define_tool(
            name=name,
            description=entry.description
            or child.config.description
            or f"Ask the {child.name} agent; it answers with its final answer.",
            input=AGENT_TOOL_INPUT,
            effects="external",
            idempotency="keyed",
            approval=entry.approval,
            handler=_native,
        )
        tool.native = f"agent:{name}"
        tool.source = f"{key}"
        found[name] = tool
        specs[name] = {"agent": child.name, "task_queue": entry.task_queue or child.task_queue}
    return found, specs, problems
