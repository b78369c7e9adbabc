"""agent.yaml's blocks below the agent's own keys, and the variable names they share.

`limits`, `modelSettings`, `modelRetry`, `env`, `processes`, `agents` and `stream`; `EnvName` and
`checked_env_names` also check the names `sandbox.env` and `mcp_servers` pass on.
`AgentConfig` (`toren.agent._config`) holds them, with the `sandbox` block and the checks that
compare one block with another.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    field_validator,
    model_validator,
)

from toren.agent._problems import also_report, problems_at
from toren.agent._spec import ModelRetry

__all__ = [
    "ENV_NAME",
    "AgentToolConfig",
    "EnvConfig",
    "EnvName",
    "Limits",
    "ModelRetryConfig",
    "ModelSettings",
    "Prices",
    "ProcessConfig",
    "Strict",
    "StreamConfig",
    "checked_env_names",
    "env_name_problem",
    "matching",
]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A variable name, as agent.yaml's `env`, `sandbox.env` and `mcp_servers` take it."""
_NOT_ENV_NAME = "is not a valid variable name"

Names = TypeVar("Names", list[str], dict[str, str])


def matching(pattern: re.Pattern[str], problem: str) -> AfterValidator:
    """A string field's check: a value `pattern` does not match is refused as `'value' problem`."""

    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} {problem}")
        return value

    return AfterValidator(check)


EnvName = Annotated[str, matching(ENV_NAME, _NOT_ENV_NAME)]
"""A field that holds one variable name."""


def env_name_problem(name: str) -> str | None:
    """Why `name` is no variable name, or `None`."""
    return None if ENV_NAME.match(name) else f"{name!r} {_NOT_ENV_NAME}"


def checked_env_names(names: Names) -> Names:
    """`names` (a list, or a mapping by name), with every one that is no variable name reported."""
    bad = [p for p in map(env_name_problem, names) if p]
    if bad:
        raise problems_at(None, bad, names)
    return names


class Strict(BaseModel):
    """A block of agent.yaml: an unknown key is a problem; keys by their YAML alias or name."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Prices(Strict):
    """USD per million tokens, for models the price table does not know (or to override it)."""

    input_per_mtok: float = Field(alias="inputPerMTok", ge=0)
    output_per_mtok: float = Field(alias="outputPerMTok", ge=0)


class Limits(Strict):
    """Run-level budgets."""

    max_steps_per_task: int = Field(50, alias="maxStepsPerTask", ge=1)
    """Model turns before the run fails with a budget error."""
    max_attempts_per_task: int | None = Field(None, alias="maxAttemptsPerTask", ge=1)
    """Default `max_attempts` for tools that declare none; `None`: at-least-once."""
    max_wall_clock_min: float | None = Field(None, alias="maxWallClockMin", gt=0)
    """Minutes before a workflow timer ends the run with a budget error; `None`: no limit."""
    approval_timeout_min: float | None = Field(None, alias="approvalTimeoutMin", gt=0)
    """Default minutes a gated call waits before it is denied; `None`: wait forever."""
    max_tokens: int | None = Field(None, alias="maxTokens", ge=1)
    """Input + output tokens a run (a thread: each message's execution) may use, counting
    every model attempt that reported usage and every child run; then it fails."""
    max_cost_usd: float | None = Field(None, alias="maxCostUSD", gt=0)
    """US dollars a run (a thread: each execution) may spend on its model calls."""
    prices: Prices | None = None
    """The model's price per million tokens; default: the `genai-prices` table."""
    thread_idle_timeout_min: float | None = Field(None, alias="threadIdleTimeoutMin", gt=0)
    """Minutes a thread (`AgentThread`) may rest with no message before it closes itself;
    `None`: it rests until `close`."""
    continue_as_new_after_events: int | None = Field(None, alias="continueAsNewAfterEvents", ge=100)
    """Continue as new past this many history events (always when Temporal suggests it)."""
    continue_as_new_after_mb: float | None = Field(None, alias="continueAsNewAfterMB", gt=0)
    """Continue as new past this much history, in MB (always when Temporal suggests it)."""
    max_result_bytes_shown: int = Field(
        256 * 1024, alias="maxResultBytesShown", ge=1024, le=32 * 1024 * 1024
    )
    """Longest tool result (UTF-8 bytes) the model is shown in each prompt: a longer one is
    cut to its head and tail with a note. History (or the store) keeps the result whole."""
    max_output_retries: int = Field(2, alias="maxOutputRetries", ge=0, le=20)
    """Times a final answer that does not match `output:` goes back to the model with the
    validation errors before the run fails with `InvalidOutput` (typed outputs only)."""
    # Agents as tools (`agents:`, `toren.workflows._agent_tools`).
    max_parallel_agents: int = Field(4, alias="maxParallelAgents", ge=1, le=100)
    """Agent tools (`agents:`) of one turn that run at once; the rest wait for a free place."""


class ModelSettings(Strict):
    """Sampling settings sent with every model request; only the ones set are sent.

    Make tool use repeatable with `temperature: 0` (and a `seed` where the server takes one).
    """

    temperature: float | None = Field(None, ge=0, le=2)
    """0 takes the likeliest token every time; higher samples more freely (Anthropic: 0-1)."""
    top_p: float | None = Field(None, alias="topP", gt=0, le=1)
    """Sample only from the tokens that make up this much of the probability."""
    seed: int | None = None
    """A fixed sampling seed (OpenAI and compatible servers; Anthropic's API has none)."""
    stop: list[str] | None = Field(None, min_length=1, max_length=4)
    """Up to 4 strings that end the reply where the model writes them (one string is fine)."""
    thinking_budget_tokens: int | None = Field(None, alias="thinkingBudgetTokens", ge=1024)
    """Anthropic's extended thinking, with this many tokens to think in (less than `maxTokens`);
    its thinking blocks are kept and sent back within a tool loop, as the API requires."""
    api: Literal["chat", "responses"] | None = None
    """openai/ and azure/ only: OpenAI's API to call, `chat` (Chat Completions, the default, what
    compatible servers speak) or `responses` (the Responses API, stateless: `store: false`)."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, alias="reasoningEffort"
    )
    """openai/ and azure/ only: how hard a reasoning model thinks (o-series, gpt-5)."""
    prompt_caching: bool | None = Field(None, alias="promptCaching")
    """Prompt caching: unset, on where it is known to work (Anthropic's cache breakpoints,
    OpenAI's `prompt_cache_key`); `false` turns it off; `true` also sends `prompt_cache_key` to
    an OpenAI-compatible server."""

    @field_validator("stop", mode="before")
    @classmethod
    def _one_string(cls, stop: Any) -> Any:
        return [stop] if isinstance(stop, str) else stop


class ModelRetryConfig(Strict):
    """How Temporal retries a failed model call.

    Retried: a 429, a 5xx, a timeout, a reply toren cannot read. Any other 4xx fails the run at
    once; a 429's Retry-After sets its own wait.
    """

    max_attempts: int = Field(ModelRetry.max_attempts, alias="maxAttempts", ge=1)
    """Attempts per model call, the first one included; then the run fails."""
    initial_interval_s: float = Field(ModelRetry.initial_interval_s, alias="initialIntervalS", gt=0)
    """Seconds before the first retry; each wait doubles."""
    max_interval_s: float = Field(ModelRetry.max_interval_s, alias="maxIntervalS", gt=0)
    """The longest wait between two attempts, in seconds."""

    @model_validator(mode="wrap")
    @classmethod
    def _ordered(cls, data: Any, handler: ModelWrapValidatorHandler[ModelRetryConfig]) -> Any:
        # Temporal refuses such a policy when the workflow schedules the call: the run would
        # be stuck, not failed, so it is refused here (with the block's other mistakes).
        problems = []
        if isinstance(data, dict):
            default = ModelRetry()
            first = data.get("initialIntervalS", data.get("initial_interval_s"))
            first = default.initial_interval_s if first is None else first
            longest = data.get("maxIntervalS", data.get("max_interval_s"))
            longest = default.max_interval_s if longest is None else longest
            if _number(first) and _number(longest) and longest < first:
                problems.append(f"maxIntervalS ({longest:g}) is below initialIntervalS ({first:g})")
        return also_report(lambda: handler(data), None, problems, data)

    def policy(self) -> ModelRetry:
        """The policy as the run records it."""
        return ModelRetry(self.max_attempts, self.initial_interval_s, self.max_interval_s)


class EnvConfig(Strict):
    """The env a handler may read through `ctx.env`."""

    required: Annotated[list[str], AfterValidator(checked_env_names)] = Field(default_factory=list)
    """Names that must be set in the worker's environment."""
    optional: Annotated[dict[str, str], AfterValidator(checked_env_names)] = Field(
        default_factory=dict
    )
    """Names that may be set, with the default used when they are not."""


class ProcessConfig(Strict):
    """One entry of `processes:`: another agent folder, or any Temporal workflow by type."""

    agent: str | None = None
    """The agent folder, relative to agent.yaml; runs as its own `AgentRun`."""
    workflow: str | None = None
    """A workflow type name, for processes that are not toren agents."""
    task_queue: str | None = None
    """Where it runs; default the child agent's queue, or this agent's for a workflow."""
    description: str = ""
    """What it does, for the model; default the child agent's description."""

    @model_validator(mode="wrap")
    @classmethod
    def _one_target(cls, data: Any, handler: ModelWrapValidatorHandler[ProcessConfig]) -> Any:
        # Read off the keys given, so a block with other mistakes hears this in the same pass.
        problems = []
        if isinstance(data, dict) and (data.get("agent") is None) == (data.get("workflow") is None):
            problems.append("give exactly one of agent: or workflow:")
        return also_report(lambda: handler(data), None, problems, data)


class AgentToolConfig(Strict):
    """One entry of `agents:`: a tool of that name that asks another agent and waits for its answer.

    The call runs the agent as a child `AgentRun` of this run (cancelled with it) and returns its
    final answer (its typed `output:` as JSON, where it declares one) as the tool's result.
    """

    agent: str
    """The agent folder, relative to agent.yaml."""
    description: str = ""
    """What it does, for the model; default the child agent's description."""
    task_queue: str | None = Field(None, alias="taskQueue")
    """Where the child runs; default the child agent's own queue."""
    approval: Literal["never", "always"] = "never"
    """`always`: a person approves each call before the child starts."""


class StreamConfig(Strict):
    """Live output of runs (`toren.worker._live`): `stream: false` turns publishing off."""

    enabled: bool = True
    """Whether model and tool activities publish to the run's stream."""
    batch_ms: int = Field(200, alias="batchMs", ge=10, le=10_000)
    """Milliseconds of deltas gathered into one publish (each is a signal in history)."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
