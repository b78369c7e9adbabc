"""Tools a model's provider runs itself (`execution_mode="provider"`): which ones toren can send.

A provider tool reaches the provider as the provider's own declaration in the model request, and
its call and result come back inside the model's reply; toren schedules nothing for it. Which
provider runs which hosted tool, and whether the API toren speaks to it can carry one, is
decided here, once, so a worker, `toren check` and `list_tools` refuse the same agents:

```python
problems = hosted_tool_problems("support", "openai/gpt-4o", agent.tools.values())
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toren.agent._tool import Tool

__all__ = ["HOSTED_TOOLS", "NO_HOSTED_TOOLS", "hosted_declaration", "hosted_tool_problems"]

HOSTED_TOOLS: dict[str, dict[str, dict[str, Any]]] = {
    "anthropic": {
        # Messages API server tool; `provider_options` may set `max_uses`, `allowed_domains`,
        # `blocked_domains`, `user_location`, or a newer `type` version.
        "web_search": {"type": "web_search_20250305"},
    },
}
"""Provider → hosted tool name → the declaration toren sends (before `provider_options`)."""

NO_HOSTED_TOOLS: dict[str, str] = {
    "openai": (
        "toren sends OpenAI function tools only: Chat Completions carries no hosted tools (its "
        "`web_search_options` search on every request rather than as a tool the model calls), "
        "and OpenAI's hosted tools on the Responses API (api: responses) are not wired in yet"
    ),
    "gemini": "toren does not send Gemini's Google Search grounding or code execution yet",
    "vertex": "toren does not send Gemini's Google Search grounding or code execution yet",
    "azure": "toren sends Azure OpenAI function tools only",
    "mock": "the mock models run no tools themselves",
}
"""Why a provider has no hosted tools toren can send."""


def hosted_tool_problems(agent: str, model: str, tools: Iterable[Tool]) -> list[str]:
    """Every provider tool of `agent` that its `model` cannot run, one problem each.

    Args:
        agent: The agent's name, for the messages.
        model: The model the agent is served with (`<provider>/<name>`).
        tools: The agent's tools; local ones are skipped.

    Returns:
        A message per refused tool naming the tool, its provider and the model's provider.
    """
    problems: list[str] = []
    served_by = model.split("/", 1)[0]
    for tool in tools:
        if tool.execution_mode != "provider":
            continue
        wanted = tool.execution_provider
        where = f"{tool.source}: " if tool.source else ""
        label = f"{where}agent {agent!r}: tool {tool.name!r} (execution_provider={wanted!r})"
        if wanted != served_by:
            problems.append(
                f"{label} is run by provider {wanted!r}, but the agent's model {model!r} is "
                f"provider {served_by!r}'s: a provider tool runs only on its own provider's "
                f"models; use a {wanted}/ model, or a local tool instead"
            )
            continue
        hosted = HOSTED_TOOLS.get(served_by)
        if hosted is None:
            why = NO_HOSTED_TOOLS.get(served_by, "toren knows no hosted tools of it")
            problems.append(
                f"{label}: provider {served_by!r} cannot run it: {why}; make it a local tool "
                "(e.g. the built-in web_search)"
            )
        elif tool.name not in hosted:
            problems.append(
                f"{label}: provider {served_by!r} runs no hosted tool named {tool.name!r} "
                f"(it runs: {', '.join(sorted(hosted))}); name the tool after the hosted one"
            )
    return problems


def hosted_declaration(provider: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The declaration of the hosted tool `name` of `provider`, with `options` merged in.

    Raises:
        ValueError: `provider` runs no hosted tool `name` (the agent loader refuses that first).
    """
    base = HOSTED_TOOLS.get(provider, {}).get(name)
    if base is None:
        raise ValueError(f"provider {provider!r} runs no hosted tool named {name!r}")
    return {**base, **options, "name": name}
