"""What crosses the workflow boundary about a question for a person: the question, its answer.

Plain dataclasses of JSON types under the same wire rules as `toren.agent._types`: add a field
only with a default, never remove or rename one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Answer", "PendingQuestion"]


@dataclass
class PendingQuestion:
    """A question waiting for a person's answer (query `pending_questions`)."""

    question_id: str
    """`q_<call_id>_<n>`: the n-th question of that tool call."""
    question: str
    """What the tool (`ask_human`, `ctx.ask`) asks."""
    call_id: str
    """The tool call that asks."""
    tool: str
    """That call's tool."""
    asked_at: str
    """When it was asked (ISO time)."""
    choices: list[str] | None = None
    """The only answers accepted, when the question gives any."""
    step: int = 0
    """The run's step when it was asked."""
    expires_at: str | None = None
    """When the question expires unanswered (ISO time); `None`: it waits until answered."""


@dataclass
class Answer:
    """A person's answer to a question."""

    question_id: str
    text: str
    by: str
    at: str
    """When it was recorded (ISO time)."""
    via: str = "signal"
    """`signal` or `update` (the client, the CLI and the HTTP API send the update)."""
