"""toren: durable LLM agents on Temporal.

An agent is a folder (`agent.yaml`, `instructions.md`, `tools/*.py`); each run is an `AgentRun`
workflow; each model call and tool call is an activity with the tool's declared contract.

```python
from toren import define_tool, ToolContext

tool = define_tool(description="Look an order up.", input=LookupOrder, handler=lookup)
```
"""

from toren.agent import Agent, AgentConfig, load_agent
from toren.context import Attachment, ToolResult, Variable
from toren.errors import ConfigError, MissingEnvError, RunError, TorenError
from toren.plugin import TorenPlugin
from toren.tool import Tool, ToolContext, define_tool
from toren.workflows import AgentRun
from toren.workflows.types import Decision, PendingApproval, RunInput, RunResult

__all__ = [
    "Agent",
    "Attachment",
    "AgentConfig",
    "AgentRun",
    "ConfigError",
    "Decision",
    "MissingEnvError",
    "PendingApproval",
    "RunError",
    "RunInput",
    "RunResult",
    "Tool",
    "ToolContext",
    "ToolResult",
    "TorenError",
    "TorenPlugin",
    "Variable",
    "define_tool",
    "load_agent",
]
