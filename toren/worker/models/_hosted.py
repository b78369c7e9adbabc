"""Tools a model's provider runs itself (`execution_mode="provider"`): which ones toren can send.

A provider tool reaches the provider as the provider's own declaration in the model request, and
its call and result come back inside the model's reply; toren schedules nothing for it. Which
provider runs which hosted tool, and whether the API toren speaks to it can carry one, is
decided here, once, so a worker, `toren check` and `list_tools` refuse the same agents:

```python
problems = hosted_tool_problems("support", "openai/gpt-4o", agent.tools.values(), api="responses")
```

A provider tool names the provider family that runs it: `anthropic`, `openai` (openai/ and
azure/ models, on the Responses API only) or `gemini` (gemini/ and vertex/ models).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toren.agent._tool import Tool

__all__ = [
    "FAMILY",
    "HOSTED_TOOLS",
    "NO_HOSTED_TOOLS",
    "hosted_declaration",
    "hosted_tool_problems",
]

HOSTED_TOOLS: dict[str, dict[str, dict[str, Any]]] = {
    "anthropic": {
        # Messages API server tool; `provider_options` may set `max_uses`, `allowed_domains`,
        # `blocked_domains`, `user_location`, or a newer `type` version.
        "web_search": {"type": "web_search_20250305"},
    },
    "openai": {
        # Responses API tool; `provider_options` may set `search_context_size`,
        # `user_location`, `filters` (`allowed_domains`), or `type` (`web_search_preview`).
        "web_search": {"type": "web_search"},
    },
    "gemini": {
        # Grounding with Google Search; `provider_options` go inside `google_search`
        # (`time_range_filter`; `exclude_domains` on Vertex AI only, the SDK says).
        "web_search": {"google_search": {}},
    },
}
"""Provider family → hosted tool name → the declaration toren sends (before `provider_options`)."""

FAMILY: dict[str, str] = {"azure": "openai", "vertex": "gemini"}
"""A model provider whose hosted tools are another's: a tool names the family (`openai`)."""

NAMED = frozenset({"anthropic"})
"""Families whose hosted declarations carry the tool's `name` (the others refuse one)."""

CHAT_REFUSAL = (
    "Chat Completions carries no hosted tools (its `web_search_options` search on every request "
    "rather than as a tool the model calls); set `modelSettings: {api: responses}`"
)
"""Why an openai/ or azure/ model on Chat Completions runs no hosted tool."""

GEMINI_MIX = (
    "Gemini refuses Google Search grounding beside function declarations in one request "
    '("Tool use with function calling is unsupported" on the 2.x models)'
)
"""Why a gemini/ or vertex/ agent cannot have a hosted tool beside its local ones."""

NO_HOSTED_TOOLS: dict[str, str] = {
    "mock": "the mock models run no tools themselves",
}
"""Why a provider has no hosted tools toren can send."""


def hosted_tool_problems(
    agent: str, model: str, tools: Iterable[Tool], api: str | None = None
) -> list[str]:
    """Every provider tool of `agent` that its `model` cannot run, one problem each.

    Args:
        agent: The agent's name, for the messages.
        model: The model the agent is served with (`<provider>/<name>`).
        tools: The agent's tools; local ones are skipped.
        api: `modelSettings.api` (`chat` when unset): OpenAI's hosted tools need `responses`.

    Returns:
        A message per refused tool naming the tool, its provider and the model's provider.
    """
    problems: list[str] = []
    served_by = model.split("/", 1)[0]
    family = FAMILY.get(served_by, served_by)
    tools = list(tools)
    local = sorted(str(tool.name) for tool in tools if tool.execution_mode != "provider")
    for tool in tools:
        if tool.execution_mode != "provider":
            continue
        wanted = tool.execution_provider
        where = f"{tool.source}: " if tool.source else ""
        label = f"{where}agent {agent!r}: tool {tool.name!r} (execution_provider={wanted!r})"
        if wanted not in (served_by, family):
            problems.append(
                f"{label} is run by provider {wanted!r}, but the agent's model {model!r} is "
                f"provider {served_by!r}'s: a provider tool runs only on its own provider's "
                f"models; use a {wanted}/ model, or a local tool instead"
            )
            continue
        hosted = HOSTED_TOOLS.get(family)
        if family == "openai" and (api or "chat") != "responses":
            problems.append(
                f"{label}: provider {served_by!r} cannot run it on Chat Completions: "
                f"{CHAT_REFUSAL}, or make it a local tool (e.g. the built-in web_search)"
            )
        elif family == "gemini" and local:
            problems.append(
                f"{label}: {GEMINI_MIX}, and the agent also has local tools "
                f"({', '.join(local)}); give the search its own agent (a handoff target, or "
                "one called as a tool), or use a local search tool (e.g. the built-in web_search)"
            )
        elif hosted is None:
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
    family = FAMILY.get(provider, provider)
    base = HOSTED_TOOLS.get(family, {}).get(name)
    if base is None:
        raise ValueError(f"provider {provider!r} runs no hosted tool named {name!r}")
    if family == "gemini":
        # Gemini's tools are one key each, the options inside it.
        ((key, value),) = base.items()
        return {key: {**value, **options}}
    declaration = {**base, **options}
    return {**declaration, "name": name} if family in NAMED else declaration
