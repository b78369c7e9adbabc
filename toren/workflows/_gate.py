"""A gated call inside `AgentRun`: ask the worker's approval policy, then wait for a person.

The policy (`approval: always`, a predicate) runs on the worker as the recorded local activity
`toren.check_approval`; its result is the ApprovalRequested entry of the event log. A gated call
waits at zero compute until a decision arrives (`toren.workflows._approvals`) or expires.
Workflow-side code: deterministic, no I/O.
"""

from __future__ import annotations

import json
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
        """Whether this call waits for a person, and why (or why its arguments are wrong).

        A call that a remembered grant lets through is announced as decided by its rule; the
        check's recorded result (rule, `granted_by`) is the event log's record of it.
        """
        if tool.approval == "never":
            return ApprovalCheck(gated=False, call_id=call_id, tool=tool.name)
        # Also for `always`: the recorded result is the ApprovalRequested entry of the event log.
        check: ApprovalCheck = await workflow.execute_local_activity(
            "toren.check_approval",
            ApprovalQuestion(self._spec.name, tool.name, call_id, args, self._grants()),
            result_type=ApprovalCheck,
            start_to_close_timeout=timedelta(seconds=30),
        )
        if not check.gated and check.granted_by:
            self._publish(
                "approval_decided",
                {"call_id": call_id, "name": tool.name, "approved": True, "by": "toren",
                 "comment": check.reason, "rule": check.rule},
            )  # fmt: skip
        return check

    async def await_decision(
        self, tool: ToolSpec, call_id: str, args: dict[str, Any], check: ApprovalCheck
    ) -> Decision:
        """Park the call until a person decides it or its approval expires; the decision.

        An approval under a rule with `remember` becomes a grant; an approval with changed
        arguments leaves the model a note of what changed.
        """
        timeout_s = check.timeout_s or tool.approval_timeout_s or self._spec.approval_timeout_s
        now = workflow.now()
        self._approvals.request(
            PendingApproval(
                call_id=call_id,
                tool=tool.name,
                args=args,
                requested_at=now.isoformat(),
                reason=check.reason,
                step=self._run.step,
                expires_at=(now + timedelta(seconds=timeout_s)).isoformat() if timeout_s else None,
                approvers=check.approvers,
                rule=check.rule,
            )
        )
        pending = self._approvals.pending.get(call_id)
        requested: dict[str, Any] = {
            "call_id": call_id,
            "name": tool.name,
            "args": args,
            "reason": check.reason,
            "expires_at": pending.expires_at if pending else None,
        }
        if check.approvers is not None:
            requested["approvers"] = check.approvers
        self._publish("approval_requested", requested)
        try:
            # The summary only with a timeout: the SDK builds it into a protobuf message (its
            # own upb arena, ~1.5 KB) that a parked run would hold for nothing.
            await workflow.wait_condition(
                lambda: self._approvals.decided(call_id),
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"approval of {tool.name} expires" if timeout_s else None,
            )
        except TimeoutError:
            self._approvals.expire(call_id, timeout_s or 0.0, check.auto, check.rule)
        decision = self._approvals.take(call_id)
        decided: dict[str, Any] = {
            "call_id": call_id,
            "name": tool.name,
            "approved": decision.approved,
            "by": decision.by,
            "comment": decision.comment,
        }
        if decision.args is not None:
            decided.update(edited=True, args_before=args, args=decision.args)
        if decision.rule:
            decided["rule"] = decision.rule
        self._publish("approval_decided", decided)
        if decision.approved and decision.via != "expiry" and check.remember:
            self._run.grants.append(
                {"rule": check.rule, "scope": check.remember, "execution": self._run.execution,
                 "by": decision.by, "call_id": call_id, "agent": self._spec.name}
            )  # fmt: skip
        if decision.approved and decision.args is not None:
            self._run.notices.append(_edited_note(tool.name, call_id, decision, args))
        return decision

    async def edit_needs(
        self, tool: ToolSpec, call_id: str, decision: Decision
    ) -> ApprovalCheck | None:
        """The check of an edited call that needs other approvers than its decider, or None.

        An approval with changed arguments is checked again on them (the recorded
        `toren.check_approval`, only on this path): edited into another rule's reach, the
        call waits for that rule's approvers, as if the model had written the edit.
        """
        if not decision.approved or decision.args is None or decision.via == "expiry":
            return None
        again = await self.check(tool, call_id, decision.args)
        if again.error is not None or not again.gated or again.approvers is None:
            return None
        if decision.by in again.approvers:
            return None
        again.reason = (
            f"{decision.by} changed its arguments; the changed call needs one of "
            f"{', '.join(again.approvers)}"
        )
        return again

    def _grants(self) -> dict[str, str]:
        """The grants in force, by rule: a thread's, and this execution's `run` ones.

        Only the answering agent's: after a handoff, another agent's rule of the same name is
        another rule.
        """
        return {
            g["rule"]: g["by"]
            for g in self._run.grants
            if (g["scope"] == "thread" or g.get("execution", 0) == self._run.execution)
            and g.get("agent", self._spec.name) == self._spec.name
        }


def _edited_note(
    tool: str, call_id: str, decision: Decision, before: dict[str, Any]
) -> dict[str, Any]:
    """What the model is told of a call a person approved with other arguments."""
    changed = {
        key: {"yours": before.get(key), "ran_with": value}
        for key, value in (decision.args or {}).items()
        if before.get(key) != value
    }
    dropped = sorted(set(before) - set(decision.args or {}))
    text = (
        f"(toren: {decision.by} approved your call {call_id} to {tool} with changed arguments, "
        f"and it ran with those: {json.dumps(decision.args, ensure_ascii=False)}; changed: "
        f"{json.dumps(changed, ensure_ascii=False)}"
        + (f"; left out: {', '.join(dropped)}" if dropped else "")
        + ")"
    )
    return {"role": "user", "content": text}
