r"""What `ToolContext.run_code` returns: `CodeRun`.

```python
run = await ctx.run_code("def main(x):\n    return {'y': 2 * x}\n", args=[21])
run.ok, run.result, run.stdout   # (True, {'y': 42}, '')
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CodeRun"]


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
