"""Approvals, rendered from history: asked, decided, or refused.

ApprovalRequested (from the `toren.check_approval` marker that gated a call),
ApprovalResolved (by signal, by the `decide` update, or by the workflow when an approval
expired) and SignalRefused for an approval signal the run refused. A refusal's reason comes
from the workflow's own checks (`toren.workflows._approvals`), so the log says what the run
said.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from toren.client._render_core import RenderState, pick
from toren.workflows._approvals import SIGNALS, decision_problem, unknown_signal_problem

__all__ = ["ApprovalEvents"]


class ApprovalEvents(RenderState):
    """Approval requests, decisions and refused approval signals."""

    def _approval_requested(self, event: HistoryEvent, check: Any) -> None:
        if not isinstance(check, dict) or check.get("error"):
            return
        call_id = check.get("call_id", "")
        if check.get("gated"):
            editor = self.edited_by.pop(call_id, None)
            if editor is not None:
                # The check of an approval's edited arguments (`_gate.edit_needs`): the call
                # waits again only when its decider is not among the edited call's approvers.
                approvers = check.get("approvers")
                if approvers is None or editor in approvers:
                    return
                self.decided.discard(call_id)
            self.pending.add(call_id)
            self.gates[call_id] = check
            self.emit(
                event,
                "ApprovalRequested",
                **pick(check, "callId=call_id", "tool", "reason", "rule", "approvers"),
            )
        elif check.get("granted_by"):
            # A remembered grant let it through: the rule decided, recorded in this check.
            self.decided.add(call_id)
            self.emit(
                event,
                "ApprovalResolved",
                callId=call_id,
                approved=True,
                by="toren",
                comment=check.get("reason", ""),
                via="policy",
                rule=check.get("rule", ""),
                grantedBy=check["granted_by"],
            )

    def _approval_signal(
        self, event: HistoryEvent, name: str, values: list[Any], identity: str
    ) -> None:
        if name not in SIGNALS:
            self.emit(
                event,
                "SignalRefused",
                signal=name,
                payload=values,
                reason=unknown_signal_problem(name),
            )
            return
        body = values[0] if len(values) == 1 else None
        if len(values) != 1:
            what = "an empty payload" if not values else f"{len(values)} values"
            reason: str | None = f"expected one JSON object, got {what}"
        else:
            gate = self.gates.get(str(body.get("call_id"))) if isinstance(body, dict) else None
            reason = decision_problem(
                body,
                self.pending,
                self.decided,
                approving=name == "approve",
                approvers=gate.get("approvers") if gate else None,
                schema=self.schemas.get(gate.get("tool", "")) if gate else None,
            )
        if reason is not None or not isinstance(body, dict):
            self.emit(event, "SignalRefused", signal=name, payload=values, reason=reason)
            return
        self._resolved(
            event,
            {
                "call_id": body["call_id"],
                "approved": name == "approve",
                # Who decided: the payload's `by`, else the sender Temporal recorded.
                "by": body.get("by") or identity or "unknown",
                "comment": body.get("comment") or "",
                "via": "signal",
                "identity": identity,
                "args": body.get("args") if name == "approve" else None,
            },
        )

    def _denied_in_workflow(self, event: HistoryEvent, message: dict[str, Any]) -> None:
        """A pending call's denial the workflow wrote itself (an expired approval, say)."""
        call_id = message.get("tool_call_id")
        content = str(message.get("content", ""))
        if (
            call_id in self.pending
            and call_id not in self.decided
            and content.startswith("denied by ")
        ):
            by, _, comment = content[len("denied by ") :].partition(": ")
            self._resolved(
                event,
                {
                    "call_id": call_id,
                    "approved": False,
                    "by": by,
                    "comment": comment,
                    "via": "expiry" if by == "toren" else "signal",
                },
            )

    def _resolved(self, event: HistoryEvent, decision: dict[str, Any]) -> None:
        call_id = decision.get("call_id", "")
        self.decided.add(call_id)
        fields: dict[str, Any] = {}
        before = self._model_args(call_id)
        after = decision.get("args")
        if isinstance(after, dict) and after != before:
            fields = {"edited": True, "argsBefore": before, "argsAfter": after}
            if decision.get("approved"):
                self.edited_by[call_id] = str(decision.get("by") or "")
        if decision.get("rule"):
            fields["rule"] = decision["rule"]
        self.emit(
            event,
            "ApprovalResolved",
            callId=call_id,
            approved=bool(decision.get("approved")),
            by=decision.get("by"),
            comment=decision.get("comment", ""),
            via=decision.get("via", ""),
            identity=decision.get("identity", ""),
            **fields,
        )

    def _model_args(self, call_id: str) -> Any:
        """The arguments the model wrote for `call_id` (from its recorded reply)."""
        raw = (self.model_calls.get(call_id) or {}).get("arguments")
        if isinstance(raw, str):
            try:
                return json.loads(raw)
            except ValueError:
                return raw
        return raw
