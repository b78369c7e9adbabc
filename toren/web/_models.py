"""Request and response bodies of the HTTP API, as pydantic models (the OpenAPI schema's source).

Requests forbid unknown fields, so a typo (`promt`) is an error naming the field instead of a
silently ignored key. A waiting call and a decision go out as the contract's own records
(`PendingApproval`, `Decision`), so the HTTP body and the run's query answer cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

from toren.agent._question_types import Answer as RecordedAnswer
from toren.agent._question_types import PendingQuestion
from toren.agent._types import Decision, PendingApproval

__all__ = [
    "AgentList",
    "Answer",
    "AnswerOut",
    "AnswerQuestion",
    "Decide",
    "DecisionOut",
    "Error",
    "EventList",
    "InboxEntry",
    "InboxList",
    "Me",
    "MessageList",
    "PendingList",
    "QuestionEntry",
    "Queued",
    "RunList",
    "RunStarted",
    "RunStatus",
    "RunSummary",
    "SendMessage",
    "StartRun",
    "StartThread",
    "ThreadStarted",
]

AGENT = r"^[a-z][a-z0-9_]*$"
"""An agent name, as in agent.yaml."""
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,199}$"
"""A run, thread, user or message id toren accepts (as `toren.workflows._input` does)."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRun(_Request):
    """`POST /v1/runs`: start an `AgentRun`."""

    agent: str = Field(pattern=AGENT, max_length=100)
    """The agent's name; its worker serves the task queue of that name."""
    prompt: str = Field(min_length=1, max_length=100_000)
    """The user's message that starts the run."""
    arguments: dict[str, Any] | None = None
    """Invocation arguments (`ctx.arguments`). Stored in history: never secrets."""
    attachments: list[str] | None = Field(default=None, max_length=100)
    """Attachment ids from `toren attach`."""
    run_id: str | None = Field(default=None, pattern=IDENTIFIER)
    """The run (workflow) id; default `<agent>-<random>`."""


class StartThread(_Request):
    """`POST /v1/threads`: start an `AgentThread`."""

    agent: str = Field(pattern=AGENT, max_length=100)
    """The agent's name; its worker serves the task queue of that name."""
    thread_id: str | None = Field(default=None, pattern=IDENTIFIER)
    """The thread (workflow) id; default `<agent>-thread-<random>`."""
    user_id: str | None = Field(default=None, pattern=IDENTIFIER)
    """Who the thread belongs to (`ctx.user_id`)."""
    arguments: dict[str, Any] | None = None
    """Invocation arguments for every execution (`ctx.arguments`)."""


class SendMessage(_Request):
    """`POST /v1/threads/{id}/messages`: one user message."""

    content: str = Field(min_length=1, max_length=100_000)
    """The message text."""
    attachments: list[str] | None = Field(default=None, max_length=100)
    """Attachment ids from `toren attach`."""
    message_id: str | None = Field(default=None, pattern=IDENTIFIER)
    """Makes a retry safe: a message id the thread has seen does not run twice."""
    wait: bool = True
    """Wait for the answer; `false` queues the message and answers at once (202)."""


class Decide(_Request):
    """`POST /v1/runs/{id}/decisions`: approve or deny a waiting call."""

    call_id: str = Field(min_length=1, max_length=200)
    """The waiting call (from `pending`)."""
    approve: bool
    """`true` to approve, `false` to deny."""
    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who decides (default `web`); a named token decides as its name, and refuses another."""
    comment: str = Field(default="", max_length=10_000)
    """Why; the model reads it on a denial."""
    args: dict[str, Any] | None = None
    """Approve with these arguments instead of the model's (checked by the run)."""


class Error(BaseModel):
    """Every error answer: what is wrong and, for a bad request, which field."""

    error: str
    field: str | None = None


class RunStarted(BaseModel):
    """A started run."""

    run_id: str
    agent: str


class ThreadStarted(BaseModel):
    """A started thread."""

    thread_id: str
    agent: str


class RunStatus(BaseModel):
    """A run or thread as Temporal describes it."""

    id: str
    agent: str
    workflow_type: str
    status: str
    """running, completed, failed, canceled, terminated, continued_as_new or timed_out."""
    result: Any = None
    """The result, once completed."""
    pending_questions: list[PendingQuestion] = Field(default_factory=list)
    """Questions it waits on a person to answer (`ask_human`, `ctx.ask`), while running."""


class PendingList(BaseModel):
    """The calls of one run or thread waiting for a decision."""

    pending: list[PendingApproval]


class InboxEntry(BaseModel):
    """A waiting call somewhere in the namespace."""

    run_id: str
    agent: str
    age_s: float
    call: PendingApproval


class InboxList(BaseModel):
    """Every waiting call this token may see, oldest first."""

    inbox: list[InboxEntry]
    questions: list[QuestionEntry] = Field(default_factory=list)
    """Every waiting question this token may see, oldest first."""


class DecisionOut(RootModel[Decision]):
    """The decision as the run recorded it."""


class EventList(BaseModel):
    """The event log (`toren events`)."""

    events: list[dict[str, Any]]


class MessageList(BaseModel):
    """A thread's conversation from `start`."""

    messages: list[dict[str, Any]]


class Answer(BaseModel):
    """The outcome of a message's execution (`text`, `steps`, `usage`, ...)."""

    model_config = ConfigDict(extra="allow")

    message_id: str | None = None
    status: str | None = None
    text: str | None = None
    agent: str | None = None
    """The agent that answered (a handoff in the thread may have changed it)."""


class Queued(BaseModel):
    """A message queued with `wait=false`."""

    message_id: str
    status: str


# -- questions for a person (`ask_human`, `ctx.ask`) -------------------------------------------


class AnswerQuestion(_Request):
    """`POST /v1/runs/{id}/answers`: answer a question the run asks."""

    question_id: str = Field(min_length=1, max_length=300)
    """The waiting question (from the run's `pending_questions`)."""
    text: str = Field(min_length=1, max_length=10_000)
    """The answer (one of the question's `choices`, when it has any)."""
    by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who answers (default `web`)."""


class AnswerOut(RootModel[RecordedAnswer]):
    """The answer as the run recorded it."""


class QuestionEntry(BaseModel):
    """A waiting question somewhere in the namespace."""

    run_id: str
    agent: str
    age_s: float
    question: PendingQuestion


InboxList.model_rebuild()  # its `questions` names `QuestionEntry`, defined above


# -- the console's reads: who am I, which agents, which runs -----------------------------------


class Me(BaseModel):
    """`GET /v1/me`: what the request's token is."""

    identity: str | None
    """The token's name (`alice@token`): its decisions are by it; `null` for an unnamed one."""
    agents: list[str] | None
    """The agents it may touch, sorted; `null`: every agent."""
    open: bool
    """The server runs without tokens: anyone may do anything."""


class AgentList(BaseModel):
    """`GET /v1/agents`: the agents this token may see, sorted."""

    agents: list[str]


class RunSummary(BaseModel):
    """One run or thread, as Temporal's visibility lists it (no history is read)."""

    run_id: str
    agent: str
    """The `TorenAgent` search attribute ("" when the run has none)."""
    workflow_type: str
    """`AgentRun` or `AgentThread`."""
    status: str
    """running, waiting, completed, failed, canceled, terminated or timed_out."""
    waiting: int
    """How many calls wait for a decision (`TorenPendingApprovals`; 0 once closed)."""
    started_at: str
    closed_at: str | None = None
    prompt: str = ""
    """The first line of the prompt, from the memo `toren.client.start_run` sets ("" for a run
    started otherwise, or a thread)."""


class RunList(BaseModel):
    """`GET /v1/runs`: newest first; `next` fetches the page after (`null`: the last page)."""

    runs: list[RunSummary]
    next: str | None = None
