"""The contract the read-only built-ins share: `web_search`, `sql_query`, `read_attachment`.

Each reads and changes nothing anywhere, so each declares the same durability contract once,
here: no effects, no idempotency key (a repeated call returns the same or costs a credit, nothing
more), never gated, three attempts for a 429, a 5xx or a lost connection, then the call fails
closed instead of spinning.

```python
tool = read_only_tool(name="web_search", description="Search the web.", input=WebSearchInput,
                      handler=search, timeout_ms=30_000, variables=[...])
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toren.agent._context import Variable
from toren.agent._define import define_tool
from toren.agent._tool import Handler, Tool

__all__ = ["read_only_tool"]


def read_only_tool(
    *,
    name: str,
    description: str,
    input: Any,
    handler: Handler,
    timeout_ms: int,
    variables: Sequence[Variable],
) -> Tool:
    """Declare a built-in that only reads; `variables` are optional, non-secret env names."""
    return define_tool(
        name=name,
        description=description,
        input=input,
        effects="none",
        idempotency="none",
        approval="never",
        timeout_ms=timeout_ms,
        max_attempts=3,
        variables=variables,
        handler=handler,
    )
