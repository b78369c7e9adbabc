"""agent.yaml as one pydantic model: what a folder may declare, with a newcomer's defaults.

```python
config, problems, failed = read_config(Path("support/agent.yaml"))
# problems: every one in the file, each naming it and the key path; `config` still holds
# every key that validated (failed ones at their defaults), so the rest of the folder can
# be checked in the same pass
```

Every key of the file is checked here: the agent's own keys, the `sandbox:` block and the
checks that compare blocks (`sandbox.env` and `mcp_servers` against `env:`); the smaller blocks
(`limits:`, `env:`, `processes:`, ...) are in `toren.agent._config_blocks`. The loader
(`toren.worker._agent`) checks what lies beyond the file: the instructions file, `tools/`,
built-ins and child agent folders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import yaml
from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from toren.agent._approval_policy import ApprovalPolicy
from toren.agent._config_blocks import (
    AgentToolConfig,
    EnvConfig,
    Limits,
    ModelRetryConfig,
    ModelSettings,
    ProcessConfig,
    StreamConfig,
    Strict,
    matching,
)
from toren.agent._context_config import ContextConfig
from toren.agent._handoff_config import HandoffConfig, handoff_key_problems
from toren.agent._mcp_config import McpServerConfig, env_names, server_name_problem
from toren.agent._output_config import output_mode_checked, output_schema_checked
from toren.agent._problems import also_report, describe
from toren.agent._sandbox_config import (
    SANDBOX_RESERVED_ENV,
    SandboxConfig,
    SandboxLimits,
    sandbox_env_problem,
)
from toren.agent._spec import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    MAX_HEARTBEAT_TIMEOUT_S,
    MIN_HEARTBEAT_TIMEOUT_S,
)

__all__ = [
    "PROVIDER_KEYS",
    "SANDBOX_RESERVED_ENV",
    "AgentConfig",
    "ConfigRead",
    "SandboxConfig",
    "SandboxLimits",
    "read_config",
]

PROVIDER_KEYS: dict[str, str | None] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    # GOOGLE_API_KEY is taken in its place (`toren.worker._agent._KEY_ALIASES`).
    "gemini": "GEMINI_API_KEY",
    # Vertex AI signs in with a service account, not a key: the project is what it must have.
    "vertex": "GOOGLE_CLOUD_PROJECT",
    "bedrock": None,  # the AWS chain; the region is checked at worker start
    # Azure: its key or an Entra token, either (`toren.worker.models.provider_for` checks).
    "azure": "AZURE_OPENAI_ENDPOINT",
    "mock": None,
}
"""Model providers `model:` may name → the env name holding the provider's API key."""

_PARTIAL = "partial"
"""Validation context key: the config is rebuilt from the keys that validated, so checks that
compare keys (already reported on the whole file) are off."""

_STAND_INS = {"name": "agent", "model": "mock/echo"}
"""What a rebuilt config holds for a required key that failed; never reported or run."""


class AgentConfig(Strict):
    """The contents of agent.yaml."""

    name: Annotated[str, matching(re.compile(r"^[a-z][a-z0-9_]*$"), "must match [a-z][a-z0-9_]*")]
    """The agent's name, `[a-z][a-z0-9_]*`; prefixes its tool activity types."""
    model: str
    """`openai/<model>`, `anthropic/<model>`, `bedrock/<modelId>` or `mock/<name>`."""
    description: str = ""
    """One line for people; not sent to the model."""
    instructions: str = "instructions.md"
    """The system prompt's file, relative to agent.yaml."""
    max_tokens: int = Field(4096, alias="maxTokens", ge=1)
    """Upper bound on tokens per model response."""
    model_settings: ModelSettings = Field(default_factory=ModelSettings, alias="modelSettings")  # type: ignore[arg-type]
    """Sampling settings sent with every model request."""
    model_retry: ModelRetryConfig = Field(default_factory=ModelRetryConfig, alias="modelRetry")  # type: ignore[arg-type]
    """How a failed model call is retried."""
    heartbeat_timeout_s: float = Field(
        DEFAULT_HEARTBEAT_TIMEOUT_S,
        alias="heartbeatTimeoutS",
        le=MAX_HEARTBEAT_TIMEOUT_S,
        allow_inf_nan=False,
    )
    """Seconds without a heartbeat before Temporal retries a model or tool call (its worker
    died); 0: none, a dead worker's call is retried at its own timeout."""
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    """Run budgets."""
    # `env` stands before `sandbox` and `builtin_tools` before `processes`: fields validate in
    # order, and the later one's check reads the earlier one.
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Env names the tools may read."""
    builtin_tools: list[str] = Field(default_factory=list)
    """Built-in tools to add, by name."""
    sandbox: SandboxConfig | None = None
    """Grant bash and the workspace file tools (`true`, or a block of options)."""
    processes: dict[str, ProcessConfig] = Field(default_factory=dict, validate_default=True)
    """Named processes `run_process` may start."""
    task_queue: str | None = None
    """The Temporal task queue; defaults to the agent's name."""
    stream: StreamConfig = Field(default_factory=StreamConfig)  # type: ignore[arg-type]
    """Live output: `true` (the default), `false`, or `{batchMs: 200}`."""
    context: ContextConfig = Field(default_factory=ContextConfig)  # type: ignore[arg-type]
    """Keeping long conversations within the model's window (`toren.agent._context_config`)."""

    @field_validator("stream", mode="before")
    @classmethod
    def _stream_switch(cls, value: Any) -> Any:
        if value is True or value is None:
            return {}
        if value is False:
            return {"enabled": False}
        if not isinstance(value, dict):
            raise ValueError(f"must be true, false or a block of batchMs; got {value!r}")
        return value

    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    """MCP servers whose tools the agent may call, by name (`toren.agent._mcp_config`)."""
    approvals: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    """Who may decide gated calls, remembered grants, expiry (`toren.agent._approval_policy`)."""

    @field_validator("heartbeat_timeout_s", mode="before")
    @classmethod
    def _seconds_not_a_switch(cls, value: Any) -> Any:
        # YAML reads `false`, `off` and `no` as a bool, which would pass as 0 and turn it off.
        if isinstance(value, bool):
            raise ValueError(f"must be a number of seconds (0: none); got {value!r}")
        return value

    @field_validator("heartbeat_timeout_s")
    @classmethod
    def _beats_fit(cls, seconds: float) -> float:
        if seconds != 0 and seconds < MIN_HEARTBEAT_TIMEOUT_S:
            raise ValueError(
                f"must be 0 (no heartbeat timeout) or at least {MIN_HEARTBEAT_TIMEOUT_S:g} "
                f"seconds (calls beat every 2 s); got {seconds!r}"
            )
        return seconds

    @field_validator("model")
    @classmethod
    def _known_provider(cls, model: str) -> str:
        provider, _, rest = model.partition("/")
        if provider not in PROVIDER_KEYS or not rest:
            raise ValueError(
                f"{model!r} must be openai/<model>, azure/<deployment>, anthropic/<model>, "
                "gemini/<model>, vertex/<model>, bedrock/<modelId> or mock/<name>"
            )
        return model

    @field_validator("model_settings", mode="wrap")
    @classmethod
    def _provider_takes(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        # Read off the keys given, so a block with other mistakes hears this in the same pass.
        problems = []
        anthropic = str(info.data.get("model", "")).startswith("anthropic/")
        thinks = anthropic or str(info.data.get("model", "")).startswith(("gemini/", "vertex/"))
        if not thinks and isinstance(value, dict) and value.get("thinkingBudgetTokens"):
            problems.append(
                "thinkingBudgetTokens: only anthropic/, gemini/ and vertex/ models take it; "
                "remove it"
            )
        openai = str(info.data.get("model", "")).startswith(("openai/", "azure/"))
        if isinstance(value, dict):
            problems += _openai_only(value, openai)
        if anthropic and isinstance(value, dict):
            if value.get("seed") is not None:
                problems.append("seed: Anthropic's API takes no seed; remove it")
            temperature = value.get("temperature")
            if isinstance(temperature, int | float) and temperature > 1:
                problems.append(f"temperature: Anthropic takes 0 to 1, got {temperature:g}")
        bedrock = str(info.data.get("model", "")).startswith("bedrock/")
        if bedrock and isinstance(value, dict) and value.get("seed") is not None:
            problems.append("seed: Bedrock's Converse API takes no seed; remove it")
        return also_report(lambda: handler(value), None, problems, value)

    @field_validator("sandbox", mode="wrap")
    @classmethod
    def _sandbox(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        if value is True:
            value = {}
        if value is False or value is None:
            return None
        if not isinstance(value, dict):
            keys = ", ".join(SandboxConfig.model_fields)
            raise ValueError(f"must be true, false or a block of {keys}; got {value!r}")
        # Compared here, not after the block validates, so its other mistakes come out too.
        # `env` is absent when it failed itself: then there is nothing to compare against.
        env = None if _partial(info) else info.data.get("env")
        names = value.get("env")
        problems = []
        if env is not None and isinstance(names, list):
            passable = (n for n in names if isinstance(n, str) and not sandbox_env_problem(n))
            problems = _undeclared(env, passable)
        return also_report(lambda: handler(value), "env", problems, names)

    @field_validator("processes")
    @classmethod
    def _processes_for_run_process(
        cls, processes: dict[str, ProcessConfig], info: ValidationInfo
    ) -> Any:
        wanted = "run_process" in info.data.get("builtin_tools", ())
        if wanted and not processes and not _partial(info):
            raise ValueError(
                "none declared, and run_process needs `processes:` to start anything; declare "
                "one, or remove run_process from builtin_tools"
            )
        return processes

    @field_validator("mcp_servers", mode="wrap")
    @classmethod
    def _mcp_env_declared(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        # Compared on the raw blocks, so each server's other mistakes come out in the same pass.
        env = None if _partial(info) else info.data.get("env")
        problems = []
        for name, server in value.items() if isinstance(value, dict) else ():
            problem = server_name_problem(str(name))
            if problem:
                problems.append(problem)
            if env is None:
                continue
            problems += [f"{name}: {p}" for p in _undeclared(env, env_names(server))]
        return also_report(lambda: handler(value), None, problems, value)

    # Typed final output (`toren.agent._output_config`): `output` before `output_model` and
    # `output_mode`, whose checks read it.
    output: dict[str, Any] | None = None
    """A JSON Schema the final answer must match (`RunResult.output` holds it parsed)."""
    output_model: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """`module:Class`: a pydantic model in the agent folder whose schema is the output's."""
    output_mode: Literal["auto", "native", "tool", "prompted"] = "auto"
    """How the model is asked for it: `auto` (by provider), `native` (`response_format`),
    `tool` (a `final_output` tool), `prompted` (an instruction with the schema)."""

    @field_validator("output")
    @classmethod
    def _output_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return output_schema_checked(schema)

    @field_validator("output_model")
    @classmethod
    def _one_output(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("output") is not None and not _partial(info):
            raise ValueError("give either output: or output_model:, not both")
        return value

    @field_validator("output_mode")
    @classmethod
    def _mode_fits(cls, mode: str, info: ValidationInfo) -> str:
        return output_mode_checked(mode, info.data, _partial(info))

    # Handoffs in a thread (`toren.agent._handoff_config`).
    handoffs: dict[str, HandoffConfig] = Field(default_factory=dict)
    """Agents the conversation may be handed to, by name: each is a `transfer_to_<name>` tool."""

    @field_validator("handoffs", mode="wrap")
    @classmethod
    def _handoff_names(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        own = info.data.get("name")
        problems = handoff_key_problems(value, own) if isinstance(value, dict) else []
        return also_report(lambda: handler(value), None, problems, value)

    # Agents as tools (`toren.workflows._agent_tools`); their folders load in `toren.worker._agent`.
    agents: dict[
        Annotated[str, matching(re.compile(r"^[a-z][a-z0-9_]*$"), "must match [a-z][a-z0-9_]*")],
        AgentToolConfig,
    ] = Field(default_factory=dict)
    """Tools that ask another agent, by tool name: `{agent: ../folder, description: ...}`."""

    @field_validator("agents")
    @classmethod
    def _agents_not_processes(
        cls, agents: dict[str, AgentToolConfig], info: ValidationInfo
    ) -> dict[str, AgentToolConfig]:
        both = sorted(set(agents) & set(info.data.get("processes") or {}))
        if both and not _partial(info):
            raise ValueError(
                f"{', '.join(map(repr, both))} is both an agent tool and a process "
                "(processes.<name>): one name, one thing; rename one"
            )
        return agents


class ConfigRead(NamedTuple):
    """What `read_config` found."""

    config: AgentConfig
    """The config; a key that failed holds its default (`name`, `model`: a stand-in)."""
    problems: list[str]
    """Every problem in the file, each naming it and the key path."""
    failed: set[str]
    """Top-level keys that failed, every one when the file is no mapping of keys; their
    fallbacks need no further checks."""


def read_config(path: Path) -> ConfigRead:
    """Read and check the agent.yaml at `path`, reporting every problem, never raising.

    When some keys fail, `config` is rebuilt from the keys that did validate, so the loader can
    go on checking the rest of the folder against it in the same pass.
    """
    unread = set(AgentConfig.model_fields)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        return ConfigRead(_stand_in(), [f"{path}: not valid YAML: {err}"], unread)
    if not isinstance(raw, dict):
        problem = f"{path}: must be a mapping of keys (name, model, ...)"
        return ConfigRead(_stand_in(), [problem], unread)
    try:
        return ConfigRead(AgentConfig.model_validate(raw), [], set())
    except ValidationError as err:
        problems = describe(err, path, AgentConfig)
        failed = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
    kept = {**_STAND_INS, **{k: v for k, v in raw.items() if k not in failed}}
    try:
        config = AgentConfig.model_validate(kept, context={_PARTIAL: True})
    except ValidationError:  # a check that spans keys; the problems above cover it
        config = _stand_in()
    return ConfigRead(config, problems, failed)


def _stand_in() -> AgentConfig:
    return AgentConfig.model_validate(_STAND_INS, context={_PARTIAL: True})


def _partial(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(_PARTIAL))


def _undeclared(env: EnvConfig, names: Iterable[str]) -> list[str]:
    """A problem for each of `names` that agent.yaml's `env` does not declare."""
    return [
        f"{n!r} is not declared in agent.yaml `env`; add it under env.required or env.optional"
        for n in names
        if n not in env.required and n not in env.optional
    ]


def _openai_only(settings: dict[str, Any], openai: bool) -> list[str]:
    """`modelSettings` problems with `api` and `reasoningEffort`: OpenAI's (openai/, azure/)."""
    if not openai:
        return [
            f"{key}: only openai/ and azure/ models take it; remove it"
            for key in ("api", "reasoningEffort")
            if settings.get(key) is not None
        ]
    if settings.get("api") != "responses":
        return []
    return [
        f"{key}: the Responses API (api: responses) takes none; remove it or use api: chat"
        for key in ("seed", "stop")
        if settings.get(key) is not None
    ]
