"""What crosses the workflow boundary about a gated call: the check, the pending call, the decision.

Plain dataclasses of JSON types under the same wire rules as `toren.agent._types` (which
re-exports them): add a field only with a default, never remove or rename one.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass
class ApprovalCheck:
    """Result of the `toren.check_approval` local activity."""

    gated: bool
    error: str | None = None
    call_id: str = ""
    tool: str = ""
    reason: str = ""


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


@dataclass
class Decision:
    """A person's decision on a gated call."""

    call_id: str
    approved: bool
    by: str
    comment: str
    at: str
    via: str = "signal"
