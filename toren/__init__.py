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
    from toren.agent._code_run import CodeRun
    from toren.agent._config import AgentConfig
    from toren.agent._context import Attachment, ExecutionState, ToolContext, ToolResult, Variable
    from toren.agent._define import define_tool
    from toren.agent._tool import Tool
    from toren.agent._types import Decision, PendingApproval, RunInput, RunResult, ThreadResult
    from toren.connect._plugin import TorenPlugin
    from toren.errors import (
        ApprovalWaitError,
        AttachmentError,
        CodecServerError,
        ConfigError,
        InvalidJSONPayloadError,
        MissingEnvError,
        ModelError,
        ModelHTTPError,
        PromptTooLongError,
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
    from toren.worker._agent import Agent, load_agent
    from toren.worker._tool_list import ToolInfo, list_tools
    from toren.worker.activities import AgentRuntime
    from toren.worker.models import ModelProvider, ModelReply, ModelRequest
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
    "PromptTooLongError",
    "QuestionExpired",
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
    "Agent": "toren.worker._agent",
    "load_agent": "toren.worker._agent",
    "CodeRun": "toren.agent._code_run",
    "AgentConfig": "toren.agent._config",
    "Attachment": "toren.agent._context",
    "ExecutionState": "toren.agent._context",
    "ToolResult": "toren.agent._context",
    "Variable": "toren.agent._context",
    "TorenPlugin": "toren.connect._plugin",
    "Tool": "toren.agent._tool",
    "ToolContext": "toren.agent._context",
    "define_tool": "toren.agent._define",
    "ToolInfo": "toren.worker._tool_list",
    "list_tools": "toren.worker._tool_list",
    "Decision": "toren.agent._types",
    "PendingApproval": "toren.agent._types",
    "RunInput": "toren.agent._types",
    "RunResult": "toren.agent._types",
    "ThreadResult": "toren.agent._types",
    "AgentRuntime": "toren.worker.activities",
    "ModelProvider": "toren.worker.models",
    "ModelReply": "toren.worker.models",
    "ModelRequest": "toren.worker.models",
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
