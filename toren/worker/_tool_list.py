"""An agent's tools as a consumer sees them, without a server: `list_tools(folder)`.

```python
from toren import list_tools

for tool in list_tools("examples/support"):
    print(tool.name, tool.effects, tool.annotations)
```

The same view `toren check` prints: each tool's contract as a run records it (`ToolSpec`: its
annotations and progress argument, who runs it), and the file that declares it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren.agent._spec import ToolSpec
from toren.errors import ConfigError
from toren.worker._agent import Agent, load_agent
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["ToolInfo", "list_tools", "tool_infos"]


@dataclass
class ToolInfo(ToolSpec):
    """One tool of an agent: the contract a run records (`ToolSpec`), and where it is declared."""

    annotations: dict[str, Any] = field(default_factory=dict)
    """The tool's free JSON metadata (`{}` when it declares none)."""
    builtin: bool = False
    """Declared in agent.yaml (`builtin_tools`, `sandbox`, `processes`) rather than `tools/`."""
    source: str | None = None
    """The file that declares it."""


def tool_infos(agent: Agent) -> list[ToolInfo]:
    """The tools of a loaded `agent`, in its order."""
    tools_dir = agent.folder / "tools"
    infos = []
    for tool in agent.tools.values():
        spec = vars(tool.spec(agent.tools))
        spec["annotations"] = dict(tool.annotations)
        builtin = not (tool.source and Path(tool.source).parent == tools_dir)
        infos.append(ToolInfo(**spec, builtin=builtin, source=tool.source))
    return infos


def list_tools(folder: str | Path) -> list[ToolInfo]:
    """Load the agent folder at `folder` and list its tools; no server or env needed.

    Raises:
        ConfigError: every problem of the folder, and every provider tool its model cannot run
            (the same agents a worker refuses, whatever the environment).
    """
    agent = load_agent(folder)
    problems = hosted_tool_problems(
        agent.name, agent.config.model, agent.tools.values(), agent.config.model_settings.api
    )
    if problems:
        raise ConfigError(problems)
    return tool_infos(agent)
