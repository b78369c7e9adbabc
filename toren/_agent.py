"""Agent folders: `agent.yaml` + `instructions.md` + `tools/*.py`, loaded and checked.

```python
from toren._agent import load_agent

agent = load_agent("examples/support")   # ConfigError lists every problem at once
env = agent.resolve_env(os.environ)      # MissingEnvError names every missing variable
```
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from toren._config import AgentConfig
from toren._tool import Tool
from toren.errors import ConfigError, MissingEnvError

__all__ = ["Agent", "load_agent", "process_specs"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "mock": None}
_PROVIDER_OPTIONAL = {"openai": ("OPENAI_BASE_URL",), "anthropic": ("ANTHROPIC_BASE_URL",)}


@dataclass
class Agent:
    """A loaded, checked agent folder."""

    config: AgentConfig
    folder: Path
    instructions: str
    tools: dict[str, Tool] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.config.name

    @property
    def task_queue(self) -> str:
        """The task queue its runs and activities use."""
        return self.config.task_queue or self.config.name

    @property
    def provider(self) -> str:
        """The model provider's prefix (`openai`, `anthropic`, `mock`)."""
        return self.config.model.split("/", 1)[0]

    def required_env(self) -> list[str]:
        """Every env name the worker must have: declared, model key, built-ins."""
        names = list(self.config.env.required)
        key = _PROVIDER_KEYS.get(self.provider)
        if key:
            names.append(key)
        from toren.tools import builtin_env

        for builtin in self.config.builtin_tools:
            names += builtin_env(builtin)
        return sorted(set(names))

    def resolve_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Read the declared env from `environ`.

        Raises:
            MissingEnvError: names every missing required variable (never a value).
        """
        missing = [n for n in self.required_env() if not environ.get(n)]
        if missing:
            raise MissingEnvError(self.name, missing)
        env = {n: environ[n] for n in self.required_env()}
        for name, default in self.config.env.optional.items():
            env[name] = environ.get(name, default)
        # The provider's endpoint is operator config (a local vLLM, a proxy): always honoured.
        for name in _PROVIDER_OPTIONAL.get(self.provider, ()):
            if environ.get(name):
                env.setdefault(name, environ[name])
        return env


def load_agent(folder: str | Path) -> Agent:
    """Load the agent folder at `folder`.

    Raises:
        ConfigError: listing every problem found, each naming the file and the key.
    """
    folder = Path(folder).resolve()
    path = folder / "agent.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: no agent.yaml in {folder}")
    config = _read_config(path)
    problems: list[str] = []
    instructions = ""
    instructions_path = folder / config.instructions
    if instructions_path.is_file():
        instructions = instructions_path.read_text(encoding="utf-8")
    else:
        problems.append(f"{path}: instructions: file {config.instructions!r} not found")
    tools, tool_problems = _discover_tools(folder / "tools", config.name)
    problems += tool_problems
    from toren.tools import builtin_tools

    builtins, builtin_problems = builtin_tools(config, path)
    problems += builtin_problems
    for tool in builtins:
        assert tool.name
        if tool.name in tools:
            problems.append(
                f"{path}: builtin_tools: {tool.name!r} collides with the agent's own tool "
                f"{tools[tool.name].source}; rename one"
            )
        else:
            tools[tool.name] = tool
    for tool in tools.values():
        for name in tool.uses:
            if name not in tools:
                problems.append(
                    f"{tool.source}: uses: tool {tool.name!r} lists {name!r}, which the agent "
                    f"does not have (its tools: {', '.join(sorted(tools))})"
                )
    if problems:
        raise ConfigError(problems)
    return Agent(config=config, folder=folder, instructions=instructions, tools=tools)


def _read_config(path: Path) -> AgentConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: must be a mapping of keys (name, model, ...)")
    try:
        config = AgentConfig.model_validate(raw)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            key = ".".join(str(p) for p in e["loc"])
            if e["type"] == "extra_forbidden":
                problems.append(f"{path}: unknown key {key!r} (check its spelling)")
            elif e["type"] == "missing":
                problems.append(f"{path}: missing key {key!r}")
            else:
                problems.append(f"{path}: {key}: {e['msg']} (got {e.get('input')!r})")
        raise ConfigError(problems) from None
    problems = []
    if not _NAME.match(config.name):
        problems.append(f"{path}: name: {config.name!r} must match [a-z][a-z0-9_]*")
    provider, _, model = config.model.partition("/")
    if provider not in _PROVIDER_KEYS or not model:
        problems.append(
            f"{path}: model: {config.model!r} must be openai/<model>, anthropic/<model> "
            "or mock/<name>"
        )
    for key in config.env.required + list(config.env.optional):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            problems.append(f"{path}: env: {key!r} is not a valid variable name")
    if problems:
        raise ConfigError(problems)
    return config


def _discover_tools(tools_dir: Path, agent: str) -> tuple[dict[str, Tool], list[str]]:
    tools: dict[str, Tool] = {}
    problems: list[str] = []
    if not tools_dir.is_dir():
        return tools, problems
    for file in sorted(tools_dir.glob("*.py")):
        if file.name.startswith("_"):
            continue
        stem = file.stem
        if not _NAME.match(stem):
            problems.append(f"{file}: file name {stem!r} must be snake_case ([a-z][a-z0-9_]*)")
            continue
        try:
            module = _import(file, f"toren_agents.{agent}.tools.{stem}")
        except ConfigError as err:
            problems += err.problems
            continue
        except Exception as err:
            problems.append(f"{file}: failed to import: {type(err).__name__}: {err}")
            continue
        found = [v for v in vars(module).values() if isinstance(v, Tool)]
        candidate = getattr(module, "tool", None)
        if isinstance(candidate, Tool):
            tool = candidate
        elif len(found) == 1:
            tool = found[0]
        elif not found:
            problems.append(f"{file}: defines no tool (assign `tool = define_tool(...)`)")
            continue
        else:
            problems.append(
                f"{file}: defines {len(found)} tools; one tool per file (or name one `tool`)"
            )
            continue
        tool.source = str(file)
        if tool.name is None:
            tool.name = stem
        elif not _NAME.match(tool.name):
            problems.append(f"{file}: tool name {tool.name!r} must be snake_case")
            continue
        if tool.name in tools:
            problems.append(
                f"{file}: tool name {tool.name!r} is also defined in {tools[tool.name].source}"
            )
            continue
        tools[tool.name] = tool
    return tools, problems


def _import(file: Path, module_name: str) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def process_specs(config: AgentConfig, folder: Path) -> dict[str, dict[str, Any]]:
    """The declared processes, resolved: `{name: {workflow, task_queue, agent?, description}}`.

    Raises:
        ConfigError: a process names no agent or workflow, or its agent folder is broken.
    """
    specs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    where = folder / "agent.yaml"
    for name, raw in config.processes.items():
        if not isinstance(raw, dict):
            problems.append(f"{where}: processes.{name}: must be a mapping (agent: or workflow:)")
            continue
        unknown = set(raw) - {"agent", "workflow", "task_queue", "description"}
        if unknown:
            problems.append(f"{where}: processes.{name}: unknown key(s) {sorted(unknown)}")
        if ("agent" in raw) == ("workflow" in raw):
            problems.append(f"{where}: processes.{name}: give exactly one of agent: or workflow:")
            continue
        if "agent" in raw:
            try:
                child = load_agent((folder / str(raw["agent"])).resolve())
            except ConfigError as err:
                problems += [f"{where}: processes.{name}: {p}" for p in err.problems]
                continue
            specs[name] = {
                "workflow": "AgentRun",
                "agent": child.name,
                "task_queue": raw.get("task_queue") or child.task_queue,
                "description": raw.get("description") or child.config.description,
            }
        else:
            specs[name] = {
                "workflow": str(raw["workflow"]),
                "task_queue": raw.get("task_queue") or config.task_queue or config.name,
                "description": raw.get("description", ""),
            }
    if problems:
        raise ConfigError(problems)
    return specs
