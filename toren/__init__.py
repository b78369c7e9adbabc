"""toren: durable LLM agents on Temporal.

An agent is a folder (`agent.yaml`, `instructions.md`, `tools/*.py`); each run is an `AgentRun`
workflow; each model call and tool call is an activity with the tool's declared contract.

```python
from toren import ToolContext, define_tool

tool = define_tool(description="Look an order up.", input=LookupOrder, handler=lookup)
```

Everything a user needs is a name here; the modules behind it whose names start with `_` are
private. Public modules: `toren.client` (start, approve, follow runs), `toren.connect`,
`toren.worker` (serve agent folders), `toren.testing` (for your tests), `toren.errors`.

Names load on first use, so that importing the workflow (`toren.workflows`) inside Temporal's
sandbox pulls in neither the worker's runtime nor its model and HTTP clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from toren import errors as _errors

if TYPE_CHECKING:
    from toren._agent import Agent, load_agent
    from toren._code_run import CodeRun
    from toren._config import AgentConfig
    from toren._context import Attachment, ExecutionState, ToolResult, Variable
    from toren._plugin import TorenPlugin
    from toren._tool import Tool, ToolContext, define_tool
    from toren._tool_list import ToolInfo, list_tools
    from toren._types import Decision, PendingApproval, RunInput, RunResult, ThreadResult
    from toren.activities import AgentRuntime
    from toren.errors import (
        ApprovalWaitError,
        AttachmentError,
        CodecServerError,
        ConfigError,
        InvalidJSONPayloadError,
        MissingEnvError,
        ModelError,
        ModelHTTPError,
        RunError,
        SandboxError,
        SqlQueryError,
        StoreError,
        StoreMissing,
        ToolError,
        TorenError,
        UndecodablePayloadError,
        UsageError,
        WebSearchError,
    )
    from toren.models import ModelProvider, ModelReply, ModelRequest
    from toren.workflows import AgentRun, AgentThread

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentRun",
    "AgentRuntime",
    "AgentThread",
    "ApprovalWaitError",
    "Attachment",
    "AttachmentError",
    "CodeRun",
    "CodecServerError",
    "ConfigError",
    "Decision",
    "ExecutionState",
    "InvalidJSONPayloadError",
    "MissingEnvError",
    "ModelError",
    "ModelHTTPError",
    "ModelProvider",
    "ModelReply",
    "ModelRequest",
    "PendingApproval",
    "RunError",
    "RunInput",
    "RunResult",
    "SandboxError",
    "SqlQueryError",
    "StoreError",
    "StoreMissing",
    "ThreadResult",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolInfo",
    "ToolResult",
    "TorenError",
    "TorenPlugin",
    "UndecodablePayloadError",
    "UsageError",
    "Variable",
    "WebSearchError",
    "define_tool",
    "list_tools",
    "load_agent",
]

_WHERE = {
    "Agent": "toren._agent",
    "load_agent": "toren._agent",
    "CodeRun": "toren._code_run",
    "AgentConfig": "toren._config",
    "Attachment": "toren._context",
    "ExecutionState": "toren._context",
    "ToolResult": "toren._context",
    "Variable": "toren._context",
    "TorenPlugin": "toren._plugin",
    "Tool": "toren._tool",
    "ToolContext": "toren._tool",
    "define_tool": "toren._tool",
    "ToolInfo": "toren._tool_list",
    "list_tools": "toren._tool_list",
    "Decision": "toren._types",
    "PendingApproval": "toren._types",
    "RunInput": "toren._types",
    "RunResult": "toren._types",
    "ThreadResult": "toren._types",
    "AgentRuntime": "toren.activities",
    "ModelProvider": "toren.models",
    "ModelReply": "toren.models",
    "ModelRequest": "toren.models",
    "AgentRun": "toren.workflows",
    "AgentThread": "toren.workflows",
}
"""Each public name → the module that defines it."""
_WHERE.update(dict.fromkeys(_errors.__all__, "toren.errors"))


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'toren' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
