"""An agent's spec: its tools' contracts and its limits, recorded by each run once.

`ToolSpec` is the one tool contract: `Tool.spec` writes it, the workflow validates arguments and
gates calls by it, `toren.list_tools` and `toren check` show it. A replay reads the recorded
spec, never today's tool code, so a field here is part of committed histories: add one with a
default, never rename one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from toren.agent._converter import decoded_once, omit_defaults

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "DEFAULT_TOOL_ATTEMPTS",
    "DEFAULT_TOOL_TIMEOUT_MS",
    "MAX_HEARTBEAT_TIMEOUT_S",
    "MIN_HEARTBEAT_TIMEOUT_S",
    "AgentSpec",
    "ModelRetry",
    "ToolSpec",
]

DEFAULT_TOOL_TIMEOUT_MS = 120_000
"""`timeout_ms` of a tool that declares none: two minutes suits an interactive agent."""
DEFAULT_HEARTBEAT_TIMEOUT_S = 10.0
"""agent.yaml `heartbeatTimeoutS` unset: a dead worker's model or tool call is retried in
seconds. Each such call costs the server a timer task (it fires whether or not the call has
ended; `bench.perf.concurrent` measures it)."""
MIN_HEARTBEAT_TIMEOUT_S = 10.0
"""The shortest `heartbeatTimeoutS` other than 0. Calls beat every 2 s (`HEARTBEAT_EVERY`), and
Temporal's SDK sends at most one beat per 0.8 of the timeout, which leaves a fifth of it (2 s
here) for a beat to arrive from a busy worker before the server takes the call for dead."""
MAX_HEARTBEAT_TIMEOUT_S = 86_400.0
"""The longest `heartbeatTimeoutS`: a day (beyond any call's own timeout worth having)."""
DEFAULT_TOOL_ATTEMPTS = 3
"""`max_attempts` of a tool that declares none (and no `limits.maxAttemptsPerTask`)."""


@dataclass
class ToolSpec:
    """A tool's contract: recorded in history once per run, listed by `toren.list_tools`.

    Built from a `Tool` by `Tool.spec`, the one place it is written.
    """

    name: str
    """The name the model sees."""
    description: str
    """What the tool does, for the model."""
    schema: dict[str, Any]
    """The JSON Schema of its arguments (the workflow validates a call's arguments with it)."""
    effects: str
    """`none`, `sandbox` or `external`."""
    idempotency: str
    """`keyed` or `none`."""
    approval: str
    """`never`, `always` or `predicate` (the predicate itself runs on the worker)."""
    timeout_ms: int | None = None
    """As declared; `None`: toren's default applies."""
    max_attempts: int | None = None
    """As declared; `None`: the agent's `limits.maxAttemptsPerTask` or toren's default."""
    approval_timeout_s: float | None = None
    """As declared; `None`: the agent's `limits.approvalTimeoutMin`, or no limit."""
    native: str | None = None
    """Set for tools the workflow runs itself (`run_process`, `check_run`, `ask_human`, and
    `agent:<tool>` for an `agents:` entry)."""
    execution_mode: str = "local"
    """`local` (an activity on a toren worker) or `provider` (the model's provider runs the tool
    inside the model call; never an activity)."""
    execution_provider: str | None = None
    """Who runs a `provider` tool (`anthropic`)."""
    progress_argument: str | None = None
    """The argument that describes the operation in progress (for `tool_call_started`)."""
    annotations: dict[str, Any] | None = None
    """The tool's free JSON metadata, when it declares any."""
    workspace: bool = False
    """Calls run in the run's workspace (`effects: sandbox`, `read_file`): one at a time, each
    from the version the last one recorded (`toren.store._workspace`)."""


@dataclass
class ModelRetry:
    """How Temporal retries a failed model call (agent.yaml `modelRetry:`).

    A history recorded before the block existed gets these defaults, the policy it ran with.
    """

    max_attempts: int = 10
    """Attempts per model call (the first one included); then the run fails."""
    initial_interval_s: float = 1.0
    """Seconds before the first retry; each wait doubles (a 429's Retry-After wins)."""
    max_interval_s: float = 60.0
    """The longest wait between two attempts."""


@decoded_once
@omit_defaults
@dataclass(frozen=True)
class AgentSpec:
    """An agent's spec, recorded by a local activity at the start of each run."""

    name: str
    model: str
    tools: list[ToolSpec]
    max_steps: int = 50
    max_attempts: int | None = None
    max_wall_clock_min: float | None = None
    approval_timeout_s: float | None = None
    max_tokens: int = 4096
    search_attributes: list[str] = field(default_factory=list)
    """toren's search attributes registered on the namespace (only these are set)."""
    continue_after_events: int | None = None
    """Continue as new at a turn boundary past this many history events."""
    continue_after_bytes: int | None = None
    """Continue as new at a turn boundary past this many history bytes."""
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Named processes `run_process` may start: workflow type, task queue, agent."""
    model_retry: ModelRetry = field(default_factory=ModelRetry)
    """The retry policy of every model call."""
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    """Model and tool calls' heartbeat timeout; 0: none."""
    thread_idle_timeout_min: float | None = None
    """Minutes a thread rests with no message before it closes itself; `None`: no limit."""
    max_tokens_budget: int | None = None
    """`limits.maxTokens`: input + output tokens a run (a thread's execution) may use."""
    max_cost_usd: float | None = None
    """`limits.maxCostUSD`."""
    prices: list[float] | None = None
    """USD per million input and output tokens of the model, when known."""
    context: dict[str, Any] | None = None
    """agent.yaml `context:` as recorded (`toren.agent._context_config`); `None`: no compaction."""
    digest: str = ""
    """`sha256:...` naming the agent's definition as this worker loaded it: this spec, the
    instructions and every file of the folder (`toren.worker._digest`); empty from a worker
    before toren 0.2."""
    # Typed final output (`toren.workflows._output`).
    output_schema: dict[str, Any] | None = None
    """agent.yaml `output:` (or `output_model:`'s schema): the final answer must match it."""
    output_name: str = ""
    """The output's name for a provider's schema (the model class's, or `output`)."""
    max_output_retries: int = 2
    """`limits.maxOutputRetries`: invalid final answers sent back before `InvalidOutput`."""
    # Handoffs in a thread (`toren.workflows._handoff`).
    handoffs: dict[str, str] = field(default_factory=dict)
    """agent.yaml `handoffs:` as tools: `transfer_to_<name>` → the agent it hands to."""
    # Agents as tools (`toren.workflows._agent_tools`).
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """agent.yaml `agents:` by tool name: `{"agent", "task_queue"}` of the child each starts."""
    max_parallel_agents: int = 4
    """`limits.maxParallelAgents`: agent-tool children of one turn running at once."""

    def heartbeat_timeout(self, start_to_close: timedelta) -> timedelta | None:
        """A call's heartbeat timeout, or none.

        None when the setting is 0, or when the call's own timeout comes nearly as soon: the
        server keeps a timer for each, fired whether or not the call has ended.
        """
        beat = timedelta(seconds=self.heartbeat_timeout_s)
        return beat if beat and start_to_close > 2 * beat else None
