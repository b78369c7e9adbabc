"""agent.yaml's `context:` section: how a long conversation is kept within the model's window.

```yaml
context:
  window: 128000            # tokens the model takes (default: the known table, else learned)
  compactAt: 0.8            # compact once a prompt would pass this share of the window
  keepLastMessages: 6       # the newest messages the model always sees verbatim
  summaryInstructions: "Summarise for a support engineer; keep order ids."
  strategy: context:shorten  # instead: shorten(messages) in context.py beside agent.yaml
```

The workflow reads these from the recorded spec (`AgentSpec.context`, built by `recorded`), so a
replay decides the same compactions (`toren.workflows._context_window`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ContextConfig"]


class ContextConfig(BaseModel):
    """Compaction of the model's view: the transcript itself is never shortened."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    window: int | None = Field(None, ge=1024, le=100_000_000)
    """Tokens the model's context window holds; unset: the table of known models, else the
    window a provider's refusal names (or implies)."""
    compact_at: float = Field(0.8, alias="compactAt", ge=0.2, le=0.95)
    """Share of the window past which the next prompt is compacted first (down to about half
    the window, so the provider's cached prefix is rebuilt rarely)."""
    keep_last_messages: int = Field(6, alias="keepLastMessages", ge=1, le=10_000)
    """The newest messages never folded into a summary nor elided."""
    summary_instructions: str | None = Field(None, alias="summaryInstructions", min_length=1)
    """The summarising call's system prompt, instead of toren's."""
    strategy: str | None = Field(None, pattern=r"^[A-Za-z_]\w*:[A-Za-z_]\w*$")
    """`module:function`, a file `module.py` beside agent.yaml: the worker calls
    `function(messages)` with the messages about to be sent and sends the list it returns,
    instead of toren's own compaction (which is then off)."""

    def recorded(self, known_window: int | None = None) -> dict[str, Any]:
        """The settings as the workflow records them in the agent's spec.

        `known_window`: the worker's table's window for the model, used when `window` is unset.
        """
        return {
            "window": self.window or known_window,
            "compact_at": self.compact_at,
            "keep_last": self.keep_last_messages,
            "summary_instructions": self.summary_instructions,
            **({"strategy": self.strategy} if self.strategy else {}),
        }
