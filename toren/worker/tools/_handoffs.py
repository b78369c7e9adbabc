"""The handoff tools: `transfer_to_<agent>` for each entry of agent.yaml `handoffs:`.

```yaml
handoffs:
  billing: {agent: ../billing, description: Invoices, refunds and payment methods.}
```

gives the model `transfer_to_billing {reason}`. The workflow runs it itself
(`toren.workflows._handoff`): the call's result is `(handed off to billing: <reason>)`, and from
the next model call on the conversation runs as `billing`. Marked `native` in the recorded
spec, so it never becomes an activity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toren.agent._context import ToolContext
from toren.agent._define import define_tool
from toren.agent._handoff_config import HANDOFF_PREFIX
from toren.agent._tool import Tool

if TYPE_CHECKING:
    from toren.agent._config import AgentConfig

__all__ = ["HANDOFF_NATIVE", "handoff_description", "handoff_tools"]

HANDOFF_NATIVE = "handoff"
"""`ToolSpec.native` of a handoff tool."""


def _native(args: Any, ctx: ToolContext) -> str:
    # Never called: the workflow runs these tools itself.
    raise RuntimeError(f"{ctx.tool} runs inside the workflow, not as an activity")


def handoff_description(name: str, what: str) -> str:
    """What the model reads of `transfer_to_<name>`; `what`: when to hand off (may be empty)."""
    what = f" ({what})" if what else ""
    return (
        f"Hand this conversation to the {name} agent{what}: from your call on, {name} answers "
        "the user (this message and their next ones). Say why in `reason`."
    )


def handoff_tools(config: AgentConfig) -> list[Tool]:
    """One `transfer_to_<name>` tool per entry of `config.handoffs`."""
    tools = []
    for name, entry in config.handoffs.items():
        tool = define_tool(
            name=f"{HANDOFF_PREFIX}{name}",
            description=handoff_description(name, entry.description),
            input={
                "type": "object",
                "properties": {
                    "reason": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Why the conversation goes to this agent",
                    }
                },
                "required": ["reason"],
                "additionalProperties": False,
            },
            effects="none",
            idempotency="none",
            handler=_native,
        )
        tool.native = HANDOFF_NATIVE
        tools.append(tool)
    return tools
