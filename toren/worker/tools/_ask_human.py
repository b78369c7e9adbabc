"""`ask_human`: the model asks a person a question and waits for the answer.

```yaml
# agent.yaml
builtin_tools: [ask_human]
limits:
  approvalTimeoutMin: 1440   # unanswered for a day: the model is told nobody answered
```

`ask_human {question, choices?}` parks the run at zero compute, like a gated call, until a
person answers (`toren answer`, the HTTP API, the `answer` signal or update in the Web UI,
`toren chat`); the model gets `{"answer": ..., "by": ...}`. With `choices`, only one of them is
accepted. It runs inside the workflow (`toren.workflows._questions`), so it is marked `native`
and never becomes an activity.
"""

from __future__ import annotations

from typing import Any

from toren.agent._context import ToolContext
from toren.agent._define import define_tool

__all__ = ["tool"]


def _native(args: Any, ctx: ToolContext) -> str:
    # Never called: the workflow runs this tool itself.
    raise RuntimeError("ask_human runs inside the workflow, not as an activity")


tool = define_tool(
    name="ask_human",
    description="Ask a person a question and wait for their answer (it may take hours). Use "
    "it when you need a decision or a fact only a person has; give `choices` when the answer "
    "must be one of a few options.",
    input={
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "description": "The question"},
            "choices": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 1,
                "description": "The only answers accepted (optional)",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    effects="none",
    idempotency="none",
    handler=_native,
)
tool.native = "ask_human"
