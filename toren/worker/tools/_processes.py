"""Background runs: `run_process` starts a named process as a child workflow; `check_run` polls.

The parent hears when a child finishes.

```yaml
# agent.yaml
builtin_tools: [run_process, check_run]
processes:
  research:                       # another agent folder: runs as its own AgentRun
    agent: ../researcher
    description: Dig into a topic and report back.
  nightly_export:                 # any Temporal workflow, by type name
    workflow: ExportOrders
    task_queue: exports
```

- `run_process {process, input}` → `{run_id, process, started}`. The child's id is derived from
  the parent run and the tool-use id (`<run>/<process>/<tool-use id>`), so a retried or replayed
  call finds the same child (`started: false`) instead of starting a second one.
- `check_run {run_id}` → `{run_id, process, status, output?, error?}`, output capped at 4,000
  characters.
- When a child finishes while the parent still runs, the parent's conversation gets a message
  on its next step. Children are abandoned, not cancelled, when the parent ends: they are
  durable runs of their own.

Both run inside the workflow (starting a child is a workflow command), so they are marked
`native` in the recorded spec and never become activities.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toren.agent._context import ToolContext
from toren.agent._define import define_tool
from toren.agent._tool import Tool

if TYPE_CHECKING:
    from toren.agent._config import AgentConfig

__all__ = ["tools"]


def _native(args: Any, ctx: ToolContext) -> str:
    # Never called: the workflow runs these tools itself.
    raise RuntimeError(f"{ctx.tool} runs inside the workflow, not as an activity")


def tools(config: AgentConfig, name: str) -> list[Tool]:
    """`run_process` or `check_run` for `config`'s processes (`AgentConfig` ensures some)."""
    names = sorted(config.processes)
    if name == "run_process":
        tool = define_tool(
            name="run_process",
            description="Start one of these background processes and return its run_id "
            "(poll it with check_run): " + ", ".join(names),
            input={
                "type": "object",
                "properties": {
                    "process": {"type": "string", "enum": names},
                    "input": {
                        "type": "string",
                        "description": "What the process should do (its prompt or input)",
                    },
                },
                "required": ["process", "input"],
                "additionalProperties": False,
            },
            effects="external",
            idempotency="keyed",
            handler=_native,
        )
    else:
        tool = define_tool(
            name="check_run",
            description="Status of a background run started with run_process: status "
            "(running, completed, failed), and its output or error when done.",
            input={
                "type": "object",
                "properties": {"run_id": {"type": "string"}},
                "required": ["run_id"],
                "additionalProperties": False,
            },
            effects="none",
            idempotency="none",
            handler=_native,
        )
    tool.native = name
    return [tool]
