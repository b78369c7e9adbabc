"""What `ToolContext.run_code` asks of the worker: `CodeRequest`, one value for the hook.

`ctx.run_code(source, modules=..., entry=..., args=..., timeout_s=...)` packs its arguments
into this and hands it to `CallHooks.run_code`; the worker's runtime unpacks it into the
sandbox's `run_code`, which checks every field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CodeRequest"]


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
