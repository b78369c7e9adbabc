"""What crosses the workflow boundary about a gated call: the check, the pending call, the decision.

Plain dataclasses of JSON types under the same wire rules as `toren.agent._types` (which
re-exports them): add a field only with a default, never remove or rename one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toren.agent._converter import omit_defaults

__all__ = ["ApprovalCheck", "ApprovalQuestion", "Decision", "PendingApproval"]


@omit_defaults
@dataclass
class ApprovalQuestion:
    """Input of the `toren.check_approval` local activity: whether this call needs a person.

    One argument, not four: the worker keeps a local activity's arguments, each a payload with
    its own metadata map, for as long as the run stays cached (0.6 KB of each parked run).
    """

    agent: str
    tool: str
    call_id: str
    args: dict[str, Any]
    grants: dict[str, str] = field(default_factory=dict)
    """The run's remembered grants in force, by rule name: who gave each (`approvals.rules`
    with `remember`); a matching call goes through without waiting."""


@dataclass
class ApprovalCheck:
    """Result of the `toren.check_approval` local activity."""

    gated: bool
    error: str | None = None
    call_id: str = ""
    tool: str = ""
    reason: str = ""
    rule: str = ""
    """The `approvals.rules` entry that matched the call ("" when none did)."""
    approvers: list[str] | None = None
    """Who may decide it; `None`: anyone."""
    remember: str = ""
    """`run` or `thread`: a person's approval lets the rule's later calls through."""
    auto: str = ""
    """`approve` or `deny`: what the rule decides when the approval expires ("": deny)."""
    timeout_s: float | None = None
    """The rule's approval timeout, over the tool's and the agent's."""
    granted_by: str = ""
    """Not gated because a grant of `rule` holds: who approved the call that made it."""


@dataclass
class PendingApproval:
    """A gated call waiting for a person (query `pending_approvals`)."""

    call_id: str
    tool: str
    args: dict[str, Any]
    requested_at: str
    reason: str
    step: int
    expires_at: str | None = None
    approvers: list[str] | None = None
    """Who may decide it (the matching rule's, else the agent's); `None`: anyone."""
    rule: str = ""
    """The `approvals.rules` entry that matched the call."""
    # A call waiting inside an agent tool's child run (`toren.workflows._agent_tools`).
    run_id: str = ""
    """The run the call waits in, when that is not the run asked (a child of it); "": this run."""
    path: list[str] | None = None
    """Where it waits in a tree of agents: `[parent agent, ..., child agent, tool]`."""


@dataclass
class Decision:
    """A person's decision on a gated call."""

    call_id: str
    approved: bool
    by: str
    comment: str
    at: str
    via: str = "signal"
    args: dict[str, Any] | None = None
    """The arguments a person approved the call with, when they edited them (the call runs with
    these; `None`: as the model wrote them)."""
    rule: str = ""
    """The rule that decided it (a grant, or the rule's `auto` at expiry); "" for a person."""
