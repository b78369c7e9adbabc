"""The data that crosses the workflow boundary: run input and result, activity inputs and results.

Also what a run carries (`RunState`), approvals and threads; the agent's spec, recorded once per
run, is in `toren.agent._spec`. Plain dataclasses of JSON types, so a run can be started from
any SDK or the `temporal` CLI with a plain JSON object, and so a history stays readable in the
Web UI.

Changing one. Workers of releases N-1 and N share a task queue during an upgrade and runs
outlive a release, so every payload must read in both (pydantic ignores an unknown field and
fails on a missing one without a default):
- Add a field only with a default (N-1 never writes it).
- Never remove or rename a field, nor make a defaulted one required, within a release: N-1
  requires it, or leaves it out at its default (`omit_defaults`).
- No new field in `RunInput` or `ThreadInput`: N-1's workflows refuse a start key they do not
  know, and toren writes these itself (child runs, the client; continue-as-new too, which from
  0.2 on ignores a key it does not know); carry it in `RunState` or `ThreadCarry`. The one
  exception is a new kind of run that N-1 cannot run anyway and should refuse at once, naming
  the key (`RunInput.fork`, 0.2: a fork needs upgraded workers); `tests/test_releases.py`
  lists it, and a continued run's input leaves it out.
- No new command (activity, timer, upsert, marker) in a workflow path, even behind
  `workflow.patched`, unless N-1's replay of N's history is given up: N-1 may take the run's
  next task. Add a value to an existing command instead (`TorenAgentDigest` rides the status
  upsert), or rely on Worker Deployments, under which N-1 never meets N's history.
- A new value of a contract string (`ToolSpec.effects`, `approval`) is unknown to N-1, whose
  workflow compares with the value it knows and takes the other branch: keep that the safe one
  (an `approval` but `never` is checked, `effects` but `none` is a regular activity). A live
  item of a new type is passed on by N-1's `toren.client.stream` and skipped by its CLI.
- At each release, replace the previous release's wheel (`tests/fixtures/releases/`) and record
  its histories (`tests/histories/record_release.py`): `tests/test_releases.py` checks the rest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from toren.agent._approval_types import ApprovalCheck, ApprovalQuestion, Decision, PendingApproval
from toren.agent._converter import omit_defaults
from toren.agent._question_types import Answer, PendingQuestion
from toren.agent._spec import AgentSpec

__all__ = [
    "CUT_AT_MAX_TOKENS",
    "STREAM_TOPIC",
    "Answer",
    "ApprovalCheck",
    "ApprovalQuestion",
    "Decision",
    "ModelCallInput",
    "ModelCallResult",
    "PendingApproval",
    "PendingQuestion",
    "RunInput",
    "RunResult",
    "RunState",
    "ThreadCarry",
    "ThreadInput",
    "ThreadMessage",
    "ThreadResult",
    "ToolCallInput",
    "ToolCallResult",
]

Message = dict[str, Any]
"""One transcript message: `{"role": "user"|"assistant"|"tool", "content": ..., ...}`."""

STREAM_TOPIC = "toren"
"""The one topic of a run's live stream (`toren.worker._live`)."""

CUT_AT_MAX_TOKENS = "length"
"""The `finish_reason` of a model reply cut at `maxTokens`, whatever the provider's own word."""


@omit_defaults
@dataclass
class RunInput:
    """Input of the `AgentRun` workflow. Never put secrets here: it is stored in history."""

    agent: str
    """The agent's name (agent.yaml `name`)."""
    prompt: str
    """The user's message that starts the run."""
    arguments: dict[str, Any] | None = None
    """Invocation arguments, readable by handlers as `ctx.arguments`."""
    messages: list[Message] | None = None
    """Prior conversation to continue from."""
    attachments: list[str] | None = None
    """Attachment ids (never bytes) the run may read."""
    user_id: str | None = None
    """Who the run is for (`ctx.user_id`)."""
    carry: RunState | None = None
    """Set by toren when a long run continues as new: everything the next run needs."""
    fork: dict[str, Any] | None = None
    """Set by `toren.client.fork_run`: this run continues another's conversation at a step.

    `{"run_id", "step", "execution"?, "state", "workspace"}`: the source run (and, for a
    thread, which execution), the model call it starts at (its first call is step `step`),
    the key-value state and the workspace version the source had then. `messages` holds the
    source's transcript up to that call; a non-empty `prompt` is one more user message after
    it. A worker of 0.1.0 refuses this key at once (a fork needs upgraded workers)."""
    eval: dict[str, Any] | None = None
    """Set by `toren.client.start_eval`: this run re-runs a recorded run with a changed agent.

    `{"run_id", "calls", "on_diverge"}`: the recorded run, its tool calls in the order it made
    them (`[{"tool", "args", "result", "is_error", "decision"?, "workspace"?}]`), and what a
    call the record cannot answer does (`continue`: an error result; `stop`: the run fails
    with kind `Diverged`). An `external` tool is never executed in such a run
    (`toren.workflows._eval_calls`). A worker of 0.1.0 refuses this key at once."""

    def continued_with(self, state: RunState) -> RunInput:
        """The next run's input: the same request, carrying `state` whole.

        A fork's origin is in `state` (`forked_from`), an eval's record too (`eval`): the
        next run is no new fork or eval.
        """
        return dataclasses.replace(self, messages=None, fork=None, eval=None, carry=state)


@dataclass
class RunResult:
    """Result of the `AgentRun` workflow."""

    text: str
    """The model's final answer."""
    steps: int
    """Model turns taken."""
    tool_calls: int
    """Tool calls made (including refused and denied ones)."""
    usage: dict[str, int] = field(default_factory=dict)
    """Summed token usage: `input_tokens`, `output_tokens` (child runs' included)."""
    cost_usd: float | None = None
    """What the model calls cost, when the model's price is known."""
    output: Any = None
    """The final answer parsed and validated against agent.yaml `output:` (None without one);
    `text` keeps the raw JSON text."""


@dataclass
class RunState:
    """Everything a run carries: the workflow owns one, continue-as-new passes it whole.

    A field added here travels across continue-as-new with nothing else to edit
    (`tests/test_run_state.py` fills every field and checks that it arrives); the transcript
    travels by reference (`prior`). What is not here is derived again in the next run (the
    transcript digest) or cannot outlive a run (pending approvals: a run continues as new only
    at a turn boundary, when none wait).
    Field names are those of the `carry` in committed histories: renaming one breaks replay.
    """

    spec: AgentSpec | None = None
    """The agent's spec, recorded once at the start of the chain."""
    messages: list[Message] = field(default_factory=list)
    """The transcript: all of it in the first run; in a continued run, the messages since."""
    prior: dict[str, Any] | None = None
    """The transcript before this run, by reference: `{"run_id", "count", "digest", "since",
    "tail"}` of the run it continued from (whose `transcript_segment` query holds the rest),
    so the carried state does not grow with the conversation."""
    step: int = 0
    """Model turns taken, across the chain."""
    tool_calls: int = 0
    """Tool calls made, across the chain."""
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    """Summed token usage."""
    state: dict[str, Any] = field(default_factory=dict)
    """Key-value state written by tools (`ctx.set_value`)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Events tools emitted (`ctx.emit`)."""
    call_ids: list[str] = field(default_factory=list)
    """Every call id used so far (a repeated tool-use id gets a suffix)."""
    queued: int = 0
    """Tool calls queued by tools so far (numbers their ids)."""
    refused: list[dict[str, Any]] = field(default_factory=list)
    """Refused approval signals."""
    children: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Background runs started by `run_process`, by run id: process, status, output or error."""
    notices: list[Message] = field(default_factory=list)
    """Messages for the model's next step (a background run finished)."""
    deadline: str | None = None
    """When `maxWallClockMin` runs out (ISO time), across the whole chain of runs."""
    runs: int = 1
    """Runs in the chain so far."""
    context: dict[str, Any] = field(default_factory=dict)
    """Scratch data of the current execution (`ctx.context`); empty when one starts."""
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Values set by `ctx.set_env`: `{"type": "text", "value": ...}` in clear, or
    `{"type": "secret", "ref": ...}`, a reference into the worker's secret store."""
    execution: int = 0
    """Executions started so far in a thread (0 in an `AgentRun`, which is one execution)."""
    execution_start: int = 0
    """Index in the transcript of the current execution's first message."""
    spent: dict[str, float] = field(default_factory=dict)
    """What the budgets count, for the run (a thread: its current execution): `tokens`,
    `cost_usd`, `calls`, `retries`, and `last_prompt` (the last call's input + output)."""
    cost_usd: float = 0.0
    """What the run's model calls (and child runs) cost so far, where prices are known."""
    workspace: str | None = None
    """The run's workspace version as its last workspace call left it (`toren.store._workspace`)."""
    stream: dict[str, Any] | None = None
    """The live stream's state at continue-as-new (its newest items, offsets, publishers), as
    `toren.worker._live.stream_state_json` writes it; the next run's stream goes on from there."""
    compaction: dict[str, Any] = field(default_factory=dict)
    """The compaction plan, message sizes and learned window (`toren.workflows._context_window`)."""
    forked_from: dict[str, Any] | None = None
    """A fork's origin, `{"run_id", "step", "execution"?}` (`RunInput.fork`): its steps are
    numbered on from the source's, and its step budget counts from `step`."""
    eval: dict[str, Any] | None = None
    """An eval run's record (`RunInput.eval`) and `position`, how far its calls got in it."""
    grants: list[dict[str, Any]] = field(default_factory=list)
    """Remembered approvals (`approvals.rules` with `remember`): `{"rule", "scope", "execution",
    "by", "call_id", "agent"}`; a later call its rule matches goes through without waiting."""
    output_retries: int = 0
    """Final answers of the current execution refused for not matching `output:` so far
    (`toren.workflows._output`)."""
    text_call_sent_back: int = 0
    """The step whose reply was last sent back as a tool call written as text
    (`toren.workflows._text_calls`; 0: none in this execution): the next step's reply is not."""
    # Handoffs in a thread (`toren.workflows._handoff`).
    agent: str | None = None
    """The agent the conversation was handed to (agent.yaml `handoffs:`), whose spec every later
    run of the chain loads; `None`: the input's agent."""
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    """Handoffs so far, in order: `{"from", "to", "reason", "execution", "step", "at"}`, `at` the
    transcript index from which `to` answered (`None` while its turn still runs)."""
    # Agents as tools (`toren.workflows._agent_tools`).
    tree: dict[str, Any] | None = None
    """Set in a run an agent tool started (its parent writes it, the only carry a new run may
    bring): `{"path", "tool", "call_id", "tokens"?, "cost_usd"?, "deadline"?}`: the agents from
    the root down to this one, the parent's tool and call, and what the parent had left."""


@omit_defaults
@dataclass
class ModelCallInput:
    """Input of `toren.call_model`: a reference to the transcript, not the transcript."""

    agent: str
    count: int
    """Messages in the transcript the model must see."""
    digest: str
    """Chained SHA-256 over those messages, to check a cached copy."""
    since: int
    """Index of the first message not produced by an earlier `call_model` of this worker."""
    tail: list[dict[str, Any]]
    """Messages from `since` on: `{"call_id": id}` for a tool activity's result (the worker has
    it), or `{"message": {...}}` for a message the workflow made (only these are written here)."""
    step: int
    model: str
    run_key: str = ""
    """`<workflow id>/<run id>`: which run's transcript; empty (what a run sends) for the run
    the activity serves (`toren.worker.activities._tool_call.run_key_of`)."""
    context: dict[str, Any] | None = None
    """The compaction plan the model's view is rendered by (`toren.agent._context_plan.view`)."""


@omit_defaults
@dataclass
class ModelCallResult:
    """Result of `toren.call_model`: the assistant message and token usage."""

    message: Message
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    finish_reason: str = ""
    """Why the model stopped: `stop`, `tool_calls`, `length` (`CUT_AT_MAX_TOKENS`), or the
    provider's own word; empty in histories recorded before toren kept it."""
    earlier_usage: dict[str, int] = field(default_factory=dict)
    """Tokens earlier attempts of this call were billed for (a reply whose attempt then died;
    kept only for agents with a token or cost budget)."""
    attempt: int = 0
    """Which attempt answered (0 in histories recorded before toren kept it)."""
    live: list[dict[str, Any]] | None = None
    """Live items (`toren.worker._live`) the call had not published when it returned: the run
    publishes them, before anything else of the turn (None in older histories)."""


@omit_defaults
@dataclass
class ToolCallInput:
    """Input of a tool activity `<agent>.<tool>`."""

    call_id: str
    tool: str
    args: dict[str, Any]
    idempotency_key: str
    step: int
    arguments: dict[str, Any] | None = None
    attachments: list[str] | None = None
    user_id: str | None = None
    context: dict[str, Any] | None = None
    """The execution's scratch data as of this turn's start."""
    env: dict[str, dict[str, Any]] | None = None
    """Values set by `ctx.set_env` (secret ones by reference)."""
    execution: dict[str, Any] | None = None
    """`{"flow_id", "step_count", "start"}` of the execution this call belongs to; None for
    the run itself (flow id the workflow id, step count `step`, start 0)."""
    workspace: str | None = None
    """The workspace version the run's last workspace call recorded (None: none yet)."""
    run_key: str = ""
    """As `ModelCallInput.run_key`."""
    answers: list[dict[str, Any]] | None = None
    """Answers to the questions the handler asked with `ctx.ask` on its earlier runs, in order:
    `{"text", "by"}`, or `{"expired": true, "after_s"}` (`toren.agent._asking`)."""
    state: dict[str, Any] | None = None
    """The run's state as of the call (what query `state` answers), for a call that runs as a
    local activity only: its workflow task stays open while it runs, so a query to its own run
    would wait until the call times out. A local activity's input is not in history; a regular
    activity's is, so there this stays `None` and `ctx.get_value` asks the run."""
    transcript: dict[str, Any] | None = None
    """`{"prior", "messages"}`: this run's own part of the transcript (what query
    `transcript_segment` answers) for a local call, as `state`; earlier runs of the chain are
    closed and still answer their queries. `None` for a regular activity."""


@omit_defaults
@dataclass
class ToolCallResult:
    """Result of a tool activity: the text the model sees, and whether it is an error."""

    content: str
    is_error: bool = False
    changes: dict[str, Any] | None = None
    """What the call changed in its run (state, queued tools, events, messages), if anything."""
    call_id: str | None = None
    """Set when the call ran as a local activity, whose recorded marker lacks its input."""
    workspace: str | None = None
    """The workspace version this call left (`toren.store._workspace`), when it wrote there."""
    ask: dict[str, Any] | None = None
    """Set when the handler asked a person (`ctx.ask`) and stopped there: `{"question",
    "choices", "timeout_s"}`; the run waits for the answer, then runs the call again with it."""


@dataclass
class ThreadInput:
    """Input of the `AgentThread` workflow. Never put secrets here: it is stored in history."""

    agent: str
    """The agent's name (agent.yaml `name`)."""
    user_id: str | None = None
    """Who the thread belongs to (`ctx.user_id`)."""
    arguments: dict[str, Any] | None = None
    """Invocation arguments, readable by handlers as `ctx.arguments` in every execution."""
    carry: ThreadCarry | None = None
    """Set by toren when a thread continues as new."""


@dataclass
class ThreadMessage:
    """A message waiting for its execution, or running (`send_message`)."""

    id: str
    """The update id (a client's retry of the same update is not run twice), or a signal's."""
    content: str
    attachments: list[str] = field(default_factory=list)
    received_at: str = ""


@dataclass
class ThreadCarry:
    """Everything a thread carries across continue-as-new."""

    run: RunState
    """The conversation (by reference) and the current execution's state."""
    queue: list[ThreadMessage] = field(default_factory=list)
    """Messages in order of arrival; the first one is running when `running` is set."""
    running: bool = False
    """Whether the first message of `queue` is mid-execution (continued as new inside it)."""
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The latest executions' outcomes by message id, for callers and retried updates."""
    idle_since: str = ""
    """When the thread last came to rest (ISO time), for the idle timeout."""
    closing: str | None = None
    """Set by `close`: who or what closes the thread."""
    upgrade_due: bool = False
    """The Worker Deployment's current version moved while an execution continued as new: the
    next run stays pinned and only learns it from this (Temporal tells a run of a change since
    it started), so it moves onto the current version at its first rest."""


@dataclass
class ThreadResult:
    """Result of the `AgentThread` workflow, once closed."""

    executions: int
    """Messages answered (one execution each)."""
    messages: int
    """Messages in the conversation."""
    closed_by: str
    """`close` (and who), or `idle` after the agent's `thread.idleTimeoutMin`."""
    usage: dict[str, int] = field(default_factory=dict)
