"""Agent folders: `agent.yaml` + `instructions.md` + `tools/*.py`, loaded and checked.

```python
from toren.worker._agent import load_agent

agent = load_agent("examples/support")   # ConfigError lists every problem at once
env = agent.resolve_env(os.environ)      # MissingEnvError names every missing variable
```
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toren.agent._config import PROVIDER_KEYS, AgentConfig, read_config
from toren.agent._tool import Tool
from toren.errors import ConfigError, MissingEnvError
from toren.worker.models._bedrock import ENV_NAMES as BEDROCK_ENV

__all__ = ["PROVIDER_SETTINGS", "Agent", "load_agent", "process_specs"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_PROVIDER_OPTIONAL = {
    "openai": ("OPENAI_BASE_URL",),
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "gemini": ("GOOGLE_GEMINI_BASE_URL",),
    "vertex": ("GOOGLE_CLOUD_LOCATION", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_VERTEX_BASE_URL"),
    "bedrock": BEDROCK_ENV,  # the AWS chain's names, kept to the worker
    "azure": ("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN", "OPENAI_API_VERSION"),
}
PROVIDER_SETTINGS = frozenset({
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "OPENAI_API_VERSION",
})  # fmt: skip
"""What a provider reads that is configuration, not a credential: a region, a project, a
file's path, an API version. Never redacted (unless agent.yaml declares the name itself):
`us-east-1` in a tool's arguments is an ordinary word."""
_KEY_ALIASES = {"GEMINI_API_KEY": "GOOGLE_API_KEY"}
"""A provider key → the other name it may go by (the SDK's older one), read when it is unset."""


@dataclass
class Agent:
    """A loaded, checked agent folder."""

    config: AgentConfig
    folder: Path
    instructions: str
    tools: dict[str, Tool] = field(default_factory=dict)
    context_strategy: Callable[[list[dict[str, Any]]], Any] | None = None
    """agent.yaml `context.strategy`: shapes the messages each model call sends."""
    output_schema: dict[str, Any] | None = None
    """The final answer's JSON Schema: agent.yaml `output:`, or `output_model:`'s."""
    output_name: str = ""
    """Its name for the provider: the model class's, or `output`."""
    agent_tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """agent.yaml `agents:` resolved, by tool name: `{"agent", "task_queue"}` of each child."""

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
        key = PROVIDER_KEYS.get(self.provider)
        if key:
            names.append(key)
        from toren.worker.tools import builtin_env

        for builtin in self.config.builtin_tools:
            names += builtin_env(builtin)
        return sorted(set(names))

    def missing_env(self, environ: Mapping[str, str]) -> list[str]:
        """The required env names `environ` lacks (a key set under its alias is not lacking)."""
        environ = _aliased(environ)
        return [n for n in self.required_env() if not environ.get(n)]

    def resolve_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Read the declared env from `environ`.

        Raises:
            MissingEnvError: names every missing required variable (never a value).
        """
        environ = _aliased(environ)
        missing = self.missing_env(environ)
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


def _aliased(environ: Mapping[str, str]) -> Mapping[str, str]:
    """`environ`, with a key set only under its alias (`_KEY_ALIASES`) under its name too."""
    found = {
        k: environ[a] for k, a in _KEY_ALIASES.items() if not environ.get(k) and environ.get(a)
    }
    return {**environ, **found} if found else environ


def load_agent(folder: str | Path, *, children: bool = True) -> Agent:
    """Load the agent folder at `folder`; `children`: its `agents:` folders too.

    Raises:
        ConfigError: listing every problem found in agent.yaml, the instructions file, `tools/`
            and the built-ins, each naming the file and the key.
    """
    folder = Path(folder).resolve()
    path = folder / "agent.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: no agent.yaml in {folder}")
    # A key that failed takes its default in `config`, so every later stage still runs; its
    # own problem is already in `problems`.
    config, problems, failed = read_config(path)
    instructions = ""
    instructions_path = folder / config.instructions
    if instructions_path.is_file():
        instructions = instructions_path.read_text(encoding="utf-8")
    elif "instructions" not in failed:
        problems.append(f"{path}: instructions: file {config.instructions!r} not found")
    tools, tool_problems = _discover_tools(folder / "tools", config.name)
    problems += tool_problems
    from toren.worker.tools import builtin_tools

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
            elif tools[name].execution_mode == "provider":
                problems.append(
                    f"{tool.source}: uses: tool {tool.name!r} lists {name!r}, which "
                    f"{tools[name].execution_provider} runs inside the model call: no tool can "
                    "invoke it"
                )
    agent_tools: dict[str, dict[str, Any]] = {}
    if children and config.agents:  # agents as tools (`toren.worker._agent_tools`)
        from toren.worker._agent_tools import agent_tools as load_agent_tools

        found, agent_tools, agent_problems = load_agent_tools(config, folder, tools, load_agent)
        tools.update(found)
        problems += agent_problems
    problems += _rule_problems(config, tools, path)
    problems += _add_handoff_tools(config, tools, path)  # handoffs in a thread
    strategy = _context_strategy(folder, config, path, problems)
    output_schema, output_name = _output(folder, config, path, tools, problems)
    if problems:
        raise ConfigError(problems)
    return Agent(
        config=config,
        folder=folder,
        instructions=instructions,
        tools=tools,
        context_strategy=strategy,
        output_schema=output_schema,
        output_name=output_name,
        agent_tools=agent_tools,
    )


def _output(
    folder: Path, config: AgentConfig, path: Path, tools: dict[str, Tool], problems: list[str]
) -> tuple[dict[str, Any] | None, str]:
    """The final answer's schema and name: `output:`, or `output_model:` imported from `folder`."""
    from toren.agent._output_config import FINAL_OUTPUT_TOOL, model_output_schema

    if (config.output or config.output_model) and FINAL_OUTPUT_TOOL in tools:
        problems.append(
            f"{path}: output: the tool name {FINAL_OUTPUT_TOOL!r} is how a model answers with "
            f"a typed output; rename the tool in {tools[FINAL_OUTPUT_TOOL].source}"
        )
    if config.output is not None:
        return config.output, "output"
    if not config.output_model:
        return None, ""
    module_name, _, name = config.output_model.partition(":")
    file = folder / (module_name.replace(".", "/") + ".py")
    where = f"{path}: output_model: {config.output_model!r}"
    if not file.is_file():
        problems.append(f"{where}: no file {file.relative_to(folder)} in the agent folder")
        return None, ""
    try:
        module = _import(file, f"toren_agents.{config.name}.{module_name}")
        return model_output_schema(getattr(module, name, None))
    except TypeError as err:
        problems.append(f"{where}: {name!r} in {file.name} {err}")
    except Exception as err:
        problems.append(f"{where}: failed to import: {type(err).__name__}: {err}")
    return None, ""


def _context_strategy(
    folder: Path, config: AgentConfig, path: Path, problems: list[str]
) -> Callable[[list[dict[str, Any]]], Any] | None:
    """The function `context.strategy` names (`module:function`, `module.py` in `folder`)."""
    if not config.context.strategy:
        return None
    module_name, _, function = config.context.strategy.partition(":")
    file = folder / f"{module_name}.py"
    where = f"{path}: context.strategy: {config.context.strategy!r}"
    if not file.is_file():
        problems.append(f"{where}: no file {file.name} beside agent.yaml")
        return None
    try:
        module = _import(file, f"toren_agents.{config.name}.{module_name}")
    except Exception as err:
        problems.append(f"{where}: failed to import: {type(err).__name__}: {err}")
        return None
    found = getattr(module, function, None)
    if not callable(found):
        problems.append(f"{where}: {file.name} has no function {function!r}")
        return None
    return found  # type: ignore[no-any-return]


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

    `AgentConfig` has checked each entry; this loads the child agent folders.

    Raises:
        ConfigError: a process's agent folder is broken (its own problems, under the process).
    """
    specs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    where = folder / "agent.yaml"
    for name, process in config.processes.items():
        if process.agent is None:
            specs[name] = {
                "workflow": str(process.workflow),
                "task_queue": process.task_queue or config.task_queue or config.name,
                "description": process.description,
            }
            continue
        try:
            child = load_agent((folder / process.agent).resolve())
        except ConfigError as err:
            problems += [f"{where}: processes.{name}.agent: {p}" for p in err.problems]
            continue
        specs[name] = {
            "workflow": "AgentRun",
            "agent": child.name,
            "task_queue": process.task_queue or child.task_queue,
            "description": process.description or child.config.description,
        }
    if problems:
        raise ConfigError(problems)
    return specs


def _rule_problems(config: AgentConfig, tools: dict[str, Tool], path: Path) -> list[str]:
    """`approvals.rules` entries naming a tool the agent lacks, or one that is never gated."""
    problems = []
    for i, rule in enumerate(config.approvals.rules):
        tool = tools.get(rule.tool)
        where = f"{path}: approvals.rules[{i}] ({rule.name})"
        if tool is None:
            problems.append(
                f"{where}: tool {rule.tool!r} is not one of the agent's tools "
                f"({', '.join(sorted(tools))})"
            )
        elif tool.approval_kind == "never":
            problems.append(
                f"{where}: tool {rule.tool!r} is never gated (approval: never), so the rule "
                "would never apply; give the tool an approval or remove the rule"
            )
    return problems


def _add_handoff_tools(config: AgentConfig, tools: dict[str, Tool], path: Path) -> list[str]:
    """Add `handoffs:`' `transfer_to_<name>` tools; a problem for each that names another tool."""
    from toren.worker.tools._handoffs import handoff_tools

    problems = []
    for tool, name in zip(handoff_tools(config), config.handoffs, strict=True):
        assert tool.name
        if tool.name in tools:
            problems.append(
                f"{path}: handoffs.{name}: its tool {tool.name!r} collides with the agent's own "
                f"tool {tools[tool.name].source}; rename that tool"
            )
        else:
            tools[tool.name] = tool
    return problems
