r"""What `ToolContext.run_code` asks of the worker (`CodeRequest`) and returns (`CodeRun`).

```python
run = await ctx.run_code("def main(x):\n    return {'y': 2 * x}\n", args=[21])
run.ok, run.result, run.stdout   # (True, {'y': 42}, '')
```

`ctx.run_code(source, modules=..., entry=..., args=..., timeout_s=...)` packs its arguments into
a `CodeRequest` for `CallHooks.run_code`; the worker's runtime unpacks it into the sandbox's
`run_code`, which checks every field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CodeRequest", "CodeRun"]


@dataclass(frozen=True)
class CodeRun:
    """One run of Python source in the sandbox: its returned value, output and failure."""

    result: Any = None
    """The JSON value the entry function returned; `None` when the run failed."""
    stdout: str = ""
    """What the code printed (first and last 8,000 characters)."""
    stderr: str = ""
    """What the code wrote to stderr, a traceback included (first and last 8,000 characters)."""
    exit_code: int | None = None
    """The Python process's exit code (124 when killed at the timeout)."""
    error: str | None = None
    """Why the run failed in one line (e.g. `ZeroDivisionError: division by zero`), or `None`."""

    @property
    def ok(self) -> bool:
        """Whether the entry function returned a JSON value."""
        return self.error is None


@dataclass(frozen=True)
class CodeRequest:
    """Python source to run in the sandbox, and how to call it."""

    source: str
    """The module's source text."""
    modules: Mapping[str, str] = field(default_factory=dict)
    """Helper files the source may import, by relative path (`pkg/util.py`)."""
    entry: str = "main"
    """The function to call."""
    args: Sequence[Any] = ()
    """The JSON values to call it with."""
    timeout_s: float = 30
    """Seconds the code may run."""
