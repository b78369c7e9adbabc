"""An agent's tools as a consumer sees them, without a server: `list_tools(folder)`.

```python
from toren import list_tools

for tool in list_tools("examples/support"):
    print(tool.name, tool.effects, tool.annotations)
```

The same view `toren check` prints: each tool's contract, its annotations and progress argument,
and who runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren.errors import ConfigError
from toren.worker._agent import Agent, load_agent
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["ToolInfo", "list_tools", "tool_infos"]


@dataclass
class ToolInfo:
    """One tool of an agent: what the model sees, its contract, and its metadata."""

    name: str
    """The name the model sees."""
    description: str
    """What the tool does, for the model."""
    schema: dict[str, Any]
    """The JSON Schema of its arguments."""
    effects: str
    """`none`, `sandbox` or `external`."""
    idempotency: str
    """`keyed` or `none`."""
    approval: str
    """`never`, `always` or `predicate`."""
    timeout_ms: int | None = None
    """As declared; `None`: toren's default applies."""
    max_attempts: int | None = None
    """As declared; `None`: the agent's `limits.maxAttemptsPerTask` or toren's default."""
    execution_mode: str = "local"
    """`local` (an activity on a toren worker) or `provider` (the model's provider runs it)."""
    execution_provider: str | None = None
    """Who runs a `provider` tool (`anthropic`)."""
    progress_argument: str | None = None
    """The argument that describes the operation in progress."""
    annotations: dict[str, Any] = field(default_factory=dict)
    """The tool's free JSON metadata."""
    builtin: bool = False
    """Declared in agent.yaml (`builtin_tools`, `sandbox`, `processes`) rather than `tools/`."""
    source: str | None = None
    """The file that declares it."""


def tool_infos(agent: Agent) -> list[ToolInfo]:
    """The tools of a loaded `agent`, in its order."""
    tools_dir = agent.folder / "tools"
    return [
        ToolInfo(
            name=t.name or "",
            description=t.description,
            schema=t.schema,
            effects=t.effects,
            idempotency=t.idempotency,
            approval=t.approval_kind,
            timeout_ms=t.timeout_ms,
            max_attempts=t.max_attempts,
            execution_mode=t.execution_mode,
            execution_provider=t.execution_provider,
            progress_argument=t.progress_argument,
            annotations=dict(t.annotations),
            builtin=not (t.source and Path(t.source).parent == tools_dir),
            source=t.source,
        )
        for t in agent.tools.values()
    ]


def list_tools(folder: str | Path) -> list[ToolInfo]:
    """Load the agent folder at `folder` and list its tools; no server or env needed.

    Raises:
        ConfigError: every problem of the folder, and every provider tool its model cannot run
            (the same agents a worker refuses, whatever the environment).
    """
    agent = load_agent(folder)
    problems = hosted_tool_problems(agent.name, agent.config.model, agent.tools.values())
    if problems:
        raise ConfigError(problems)
    return tool_infos(agent)
