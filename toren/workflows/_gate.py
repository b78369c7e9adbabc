"""A gated call inside `AgentRun`: ask the worker's approval policy, then wait for a person.

The policy (`approval: always`, a predicate) runs on the worker as the recorded local activity
`toren.check_approval`; its result is the ApprovalRequested entry of the event log. A gated call
waits at zero compute until a decision arrives (`toren.workflows._approvals`) or expires.
Workflow-side code: deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec, ToolSpec
    from toren.agent._types import (
        ApprovalCheck,
        ApprovalQuestion,
        Decision,
        PendingApproval,
        RunState,
    )
    from toren.workflows._approvals import Approvals

__all__ = ["Gate"]


class Gate:
    """Checks and waits on the gated calls of one run."""

    def __init__(
        self, run: RunState, approvals: Approvals, publish: Callable[[str, dict[str, Any]], None]
    ) -> None:
        self._run = run
        self._approvals = approvals
        self._publish = publish

    @property
    def _spec(self) -> AgentSpec:
        assert self._run.spec is not None
        return self._run.spec

    async def check(self, tool: ToolSpec, call_id: str, args: dict[str, Any]) -> ApprovalCheck:
        """Whether this call waits for a person, and why (or why its arguments are wrong)."""
        if tool.approval == "never":
            return ApprovalCheck(gated=False, call_id=call_id, tool=tool.name)
        # Also for `always`: the recorded result is the ApprovalRequested entry of the event log.
        check: ApprovalCheck = await workflow.execute_local_activity(
            "toren.check_approval",
            ApprovalQuestion(self._spec.name, tool.name, call_id, args),
            result_type=ApprovalCheck,
            start_to_close_timeout=timedelta(seconds=30),
        )
        return check

    async def await_decision(
        self, tool: ToolSpec, call_id: str, args: dict[str, Any], reason: str
    ) -> Decision:
        """Park the call until a person decides it or its approval expires; the decision."""
        timeout_s = tool.approval_timeout_s or self._spec.approval_timeout_s
        now = workflow.now()
        self._approvals.request(
            PendingApproval(
                call_id=call_id,
                tool=tool.name,
                args=args,
                requested_at=now.isoformat(),
                reason=reason,
                step=self._run.step,
                expires_at=(now + timedelta(seconds=timeout_s)).isoformat() if timeout_s else None,
            )
        )
        pending = self._approvals.pending.get(call_id)
        self._publish(
            "approval_requested",
            {"call_id": call_id, "name": tool.name, "args": args, "reason": reason,
             "expires_at": pending.expires_at if pending else None},
        )  # fmt: skip
        try:
            # The summary only with a timeout: the SDK builds it into a protobuf message (its
            # own upb arena, ~1.5 KB) that a parked run would hold for nothing.
            await workflow.wait_condition(
                lambda: self._approvals.decided(call_id),
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"approval of {tool.name} expires" if timeout_s else None,
            )
        except TimeoutError:
            self._approvals.expire(call_id, timeout_s or 0.0)
        decision = self._approvals.take(call_id)
        self._publish(
            "approval_decided",
            {"call_id": call_id, "name": tool.name, "approved": decision.approved,
             "by": decision.by, "comment": decision.comment},
        )  # fmt: skip
        return decision
