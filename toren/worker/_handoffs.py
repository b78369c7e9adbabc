"""Loading `handoffs:` targets: each entry's folder must hold the agent it names.

```python
targets = handoff_targets(agent)   # {"billing": <Agent billing>}; ConfigError otherwise
```

A worker serving an agent serves its handoff targets too, on the agent's task queue
(`AgentRuntime.load` follows them, each folder once, so two agents that hand to each other load
once each): a thread runs on one task queue, and after a handoff its model and tool calls are
the target's, scheduled on that queue.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from toren.agent._handoff_config import HANDOFF_PREFIX
from toren.errors import ConfigError
from toren.worker._agent import Agent, load_agent
from toren.worker.tools._handoffs import handoff_description

__all__ = ["HandoffFollower", "handoff_targets"]


def handoff_targets(agent: Agent, loaded: dict[Path, Agent] | None = None) -> dict[str, Agent]:
    """The agents `agent`'s `handoffs:` names, loaded (from `loaded` when already there).

    Fills a handoff tool's description from the target's when the entry gives none.

    Raises:
        ConfigError: every problem, each under `handoffs.<name>`: a folder that does not load,
            one that holds another agent than the entry names, or `agent`'s own folder.
    """
    where = agent.folder / "agent.yaml"
    targets: dict[str, Agent] = {}
    problems: list[str] = []
    for name, entry in agent.config.handoffs.items():
        folder = (agent.folder / entry.agent).resolve()
        key = f"{where}: handoffs.{name}.agent: {entry.agent!r}"
        if folder == agent.folder:
            problems.append(f"{key} is this agent's own folder; an agent cannot hand to itself")
            continue
        target = (loaded or {}).get(folder)
        if target is None:
            try:
                target = load_agent(folder)
            except ConfigError as err:
                problems += [f"{key}: {p}" for p in err.problems]
                continue
        if target.name != name:
            problems.append(
                f"{key} holds agent {target.name!r}, not {name!r}: name the entry {target.name!r} "
                "(the model hands off with transfer_to_<agent name>)"
            )
            continue
        tool = agent.tools.get(f"{HANDOFF_PREFIX}{name}")
        if tool is not None and not entry.description and target.config.description:
            tool.description = handoff_description(name, target.config.description)
        targets[name] = target
    if problems:
        raise ConfigError(problems)
    return targets


class HandoffFollower:
    """Agent folders to load, growing by the handoff targets of each one loaded.

    ```python
    follow = HandoffFollower(["examples/triage"])
    for folder in follow:                      # triage, then billing (its handoff target)
        agent = follow.loaded(load_agent(folder) if ... else folder)
    follow.targets      # {"triage": ["billing"], "billing": ["triage"]}
    follow.companions   # {"billing"}: loaded only as a target, served on triage's queue
    ```
    Each folder loads once, so agents that hand to each other never load forever.
    """

    def __init__(self, folders: Sequence[str | Path | Agent]) -> None:
        self._queue: list[str | Path | Agent] = list(folders)
        self._seen: dict[Path, Agent] = {}
        self._given = {_folder_of(f) for f in folders}
        self.targets: dict[str, list[str]] = {}
        """Each loaded agent's handoff targets, by name."""
        self.companions: set[str] = set()
        """Agents loaded only because another hands to them (not given themselves)."""

    def __iter__(self) -> Iterator[str | Path | Agent]:
        index = 0
        while index < len(self._queue):
            folder = self._queue[index]
            index += 1
            if isinstance(folder, Agent) or _folder_of(folder) not in self._seen:
                yield folder

    def loaded(self, agent: Agent) -> Agent:
        """Note `agent` as loaded and queue its handoff targets; `agent` back.

        Raises:
            ConfigError: a target does not load or is not the agent its entry names.
        """
        self._seen[agent.folder] = agent
        if agent.folder not in self._given:
            self.companions.add(agent.name)
        targets = handoff_targets(agent, self._seen)
        self.targets[agent.name] = list(targets)
        for target in targets.values():
            if target.folder not in self._seen and target not in self._queue:
                self._seen[target.folder] = target
                self._queue.append(target)
        return agent


def _folder_of(folder: str | Path | Agent) -> Path:
    return folder.folder if isinstance(folder, Agent) else Path(folder).resolve()
