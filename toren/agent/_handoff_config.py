"""agent.yaml `handoffs:`: the agents a thread's agent may hand the conversation to.

```yaml
handoffs:
  billing:                      # the target agent's name (its agent.yaml `name`)
    agent: ../billing           # its folder, relative to agent.yaml
    description: Invoices, refunds and payment methods.
```

Each entry becomes the tool `transfer_to_<name>` (`toren.worker.tools._handoffs`); the loader
(`toren.worker._handoffs`) loads the target folder and checks that it holds the agent named.
"""

from __future__ import annotations

import re
from typing import Any

from toren.agent._config_blocks import Strict

__all__ = ["HANDOFF_PREFIX", "HandoffConfig", "handoff_key_problems"]

HANDOFF_PREFIX = "transfer_to_"
"""The handoff tools' names: `transfer_to_<agent name>`."""

_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class HandoffConfig(Strict):
    """One entry of `handoffs:`: the agent folder the conversation may be handed to."""

    agent: str
    """The target agent's folder, relative to agent.yaml."""
    description: str = ""
    """When to hand off, for the model; default the target agent's description."""


def handoff_key_problems(handoffs: dict[str, Any], own_name: str | None) -> list[str]:
    """Problems of the entries' names: each must be an agent name, none this agent's own."""
    problems = []
    for name in handoffs:
        if not _AGENT_NAME.match(str(name)):
            problems.append(
                f"{name}: {name!r} is not an agent name ([a-z][a-z0-9_]*): name the entry by "
                "the target agent.yaml's `name`"
            )
        elif name == own_name:
            problems.append(
                f"{name}: an agent cannot hand a conversation to itself; remove the entry"
            )
    return problems
