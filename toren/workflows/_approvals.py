"""Approval bookkeeping inside `AgentRun`: pending calls, decisions, refused signals, details.

Pure workflow-side code. Signal handlers never raise: a payload that is empty, not a JSON
object, names no pending call, or decides a call twice is refused, recorded and logged, and the
run goes on waiting. A refusal is the safe answer: `{}` never approves the only pending call.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Collection
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from toren.agent._types import Decision, PendingApproval

__all__ = [
    "APPROVE_HELP",
    "DECIDE_HELP",
    "DENY_HELP",
    "SIGNALS",
    "Approvals",
    "decision_problem",
    "json_type",
    "unknown_signal_problem",
]

APPROVE_HELP = (
    'Approve a waiting tool call. Data: {"call_id": "<call_id from User Metadata → Current '
    'Details>", "by": "<your name>", "comment": "<optional>"}'
)
DENY_HELP = (
    'Deny a waiting tool call; the model is told why. Data: {"call_id": "<id>", '
    '"by": "<your name>", "comment": "<reason>"}'
)
DECIDE_HELP = (
    'Approve or deny a waiting call and get the decision back. Data: {"call_id": "<id>", '
    '"approve": true, "by": "<your name>", "comment": "<optional>"}'
)


SIGNALS = ("approve", "deny", "answer")
"""The signals a run takes; any other name is refused and recorded."""
DECIDE_EXAMPLE = (
    '{"call_id": "<id>", "approve": true, "by": "<your name>", "comment": "<optional>"}'
)


class Approvals:
    """Pending approvals, decisions and refusals of one run."""

    def __init__(
        self,
        refused: Callable[[], list[dict[str, Any]]],
        on_change: Callable[[], None],
        headline: Callable[[], str] = lambda: "",
    ) -> None:
        """Create the bookkeeping of one run.

        Args:
            refused: the run's list of refused signals (it lives in the run's `RunState`).
            on_change: called when calls start or stop waiting (keeps the inbox current).
            headline: what the run is and how far it got, above the approvals in the details
                (a run started by any client shows it, with or without a summary).
        """
        self._refused = refused
        self._on_change = on_change
        self._headline = headline
        self.pending: dict[str, PendingApproval] = {}
        self.decisions: dict[str, Decision] = {}
        self.extra_details: Callable[[], str] = lambda: ""
        """More Markdown under the approvals' (the run's questions: `_questions`)."""

    def changed(self) -> None:
        """Something else waiting for a person changed: refresh the details and the inbox."""
        self.publish()
        self._on_change()

    # -- the workflow's side ---------------------------------------------------------------

    def request(self, pending: PendingApproval) -> None:
        """Record `pending` as waiting and tell the Web UI."""
        self.pending[pending.call_id] = pending
        workflow.logger.info("tool call %s (%s) waits for approval", pending.call_id, pending.tool)
        self.publish()
        self._on_change()

    def decided(self, call_id: str) -> bool:
        """Whether `call_id` has a decision."""
        return call_id in self.decisions

    def expire(self, call_id: str, after_s: float) -> None:
        """Deny `call_id` because nobody decided within `after_s` seconds."""
        if call_id in self.decisions:
            return
        self.decisions[call_id] = Decision(
            call_id=call_id,
            approved=False,
            by="toren",
            comment=f"approval expired after {_duration(after_s)}",
            at=workflow.now().isoformat(),
            via="expiry",
        )

    def take(self, call_id: str) -> Decision:
        """The decision on `call_id`; the call stops being pending."""
        self.pending.pop(call_id, None)
        self.publish()
        self._on_change()
        return self.decisions[call_id]

    def pending_list(self) -> list[PendingApproval]:
        """Pending calls in the order they were requested."""
        return list(self.pending.values())

    # -- signals and the update --------------------------------------------------------------

    def on_signal(self, kind: str, payload: tuple[Any, ...]) -> None:
        """Handle an `approve`/`deny` signal; refuse and record anything malformed."""
        if len(payload) != 1:
            what = "an empty payload" if not payload else f"{len(payload)} values"
            self._refuse(kind, payload, f"expected one JSON object, got {what}")
            return
        body = payload[0]
        problem = self._problem(body)
        if problem is not None:
            self._refuse(kind, body, problem)
            return
        self._record(body, approved=kind == "approve", via="signal")

    def validate_update(self, payload: tuple[Any, ...]) -> None:
        """Reject a `decide` update synchronously when it cannot be applied.

        Raises:
            ApplicationError: non-retryable, saying what to send (sending it again as it is
                cannot succeed).
        """
        problem: str | None
        if len(payload) != 1:
            what = "no argument" if not payload else f"{len(payload)} arguments"
            problem = f"expected one JSON object, got {what}"
        else:
            problem = self._problem(payload[0])
            if problem is None and not isinstance(payload[0].get("approve"), bool):
                problem = 'field "approve" must be true or false'
        if problem is not None:
            raise ApplicationError(
                f"{problem}; send {DECIDE_EXAMPLE}", type="InvalidDecision", non_retryable=True
            )

    def on_update(self, payload: tuple[Any, ...]) -> Decision:
        """Apply an accepted `decide` update (its validator has checked `payload`)."""
        request = payload[0]
        return self._record(request, approved=bool(request["approve"]), via="update")

    def on_unknown_signal(self, name: str, payload: Any) -> None:
        """Refuse and record a signal no handler has (a misspelled `approve`, say)."""
        self._refuse(name, payload, unknown_signal_problem(name))

    def _problem(self, body: Any) -> str | None:
        return decision_problem(body, self.pending, self.decisions)

    def _record(self, body: dict[str, Any], approved: bool, via: str) -> Decision:
        decision = Decision(
            call_id=body["call_id"],
            approved=approved,
            by=str(body.get("by") or "unknown"),
            comment=str(body.get("comment") or ""),
            at=workflow.now().isoformat(),
            via=via,
        )
        self.decisions[decision.call_id] = decision
        workflow.logger.info(
            "call %s %s by %s", decision.call_id, "approved" if approved else "denied", decision.by
        )
        return decision

    def _refuse(self, kind: str, payload: Any, reason: str) -> None:
        try:
            shown = json.dumps(payload, default=repr)
        except (TypeError, ValueError):
            shown = repr(payload)
        if len(shown) > 500:
            shown = shown[:500] + "…"
        self._refused().append(
            {"signal": kind, "payload": shown, "reason": reason, "at": workflow.now().isoformat()}
        )
        workflow.logger.warning("refused %s signal: %s (payload %s)", kind, reason, shown)
        self.publish()

    # -- what the Web UI shows -------------------------------------------------------------

    def publish(self) -> None:
        """Set the run's current details (Markdown, shown in the Web UI) to what is waiting."""
        headline = self._headline()
        details = self.details()
        workflow.set_current_details(f"{headline}\n\n{details}" if headline else details)

    def details(self) -> str:
        """Markdown telling a person what waits and exactly what to paste to decide it.

        ASCII only in toren's own words: one character beyond it makes Python store the whole
        text at two bytes a character, and the SDK keeps the text for as long as the run waits.
        """
        if not self.pending:
            text = "No tool call is waiting for approval."
        else:
            n = len(self.pending)
            parts = [f"## {n} tool call{'s' if n > 1 else ''} waiting for approval"]
            for p in self.pending.values():
                approve = json.dumps({"call_id": p.call_id, "by": "your-name", "comment": ""})
                deny = json.dumps({"call_id": p.call_id, "by": "your-name", "comment": "why"})
                until = _short_time(p.expires_at) if p.expires_at else "never (waits until decided)"
                parts.append(
                    f"### `{p.tool}` - call `{p.call_id}`\n"
                    f"- **args:** `{json.dumps(p.args, ensure_ascii=False)[:1000]}`\n"
                    f"- **why gated:** {p.reason}\n"
                    f"- **waiting since:** {_short_time(p.requested_at)}\n"
                    f"- **expires:** {until}\n\n"
                    "To decide: **More Actions > Send a Signal**, choose `approve` or `deny`, "
                    "paste into Data with your name in `by`, press Tab, then Submit:\n\n"
                    f"approve:\n```json\n{approve}\n```\n"
                    f"deny:\n```json\n{deny}\n```\n"
                    "Or **Send an Update** > `decide` with "
                    f'`{{"call_id": "{p.call_id}", "approve": true, "by": "your-name"}}` '
                    "for an immediate answer. Press **R** here to refresh after sending."
                )
            text = "\n\n".join(parts)
        text += f"\n\n{self.extra_details()}" if self.extra_details() else ""
        if self._refused():
            last = self._refused()[-1]
            text += f"\n\n_Last refused signal ({last['signal']}): {last['reason']}_"
        return text


def unknown_signal_problem(name: str) -> str:
    """Why a signal named `name` is refused: no such signal, and the closest one."""
    close = difflib.get_close_matches(name, SIGNALS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (signals: {', '.join(SIGNALS)})"
    return f"unknown signal {name!r}{hint}"


def decision_problem(body: Any, pending: Collection[str], decided: Collection[str]) -> str | None:
    """Why a decision payload must be refused, or `None` when it decides a waiting call.

    Shared by the workflow and the event-log renderer, so both tell the same story.
    """
    if not isinstance(body, dict):
        return f"expected a JSON object, got {json_type(body)}"
    call_id = body.get("call_id")
    if call_id is not None and not isinstance(call_id, str):
        return f'"call_id" must be a string, got {json_type(call_id)}'
    if not call_id:
        return f'missing "call_id" (waiting: {", ".join(pending) or "none"})'
    if call_id in decided:
        return f"call {call_id!r} was already decided"
    if call_id not in pending:
        return f"unknown call_id {call_id!r} (waiting: {', '.join(pending) or 'none'})"
    for key in ("by", "comment"):
        if body.get(key) is not None and not isinstance(body[key], str):
            return f'"{key}" must be a string'
    return None


def _short_time(iso: str) -> str:
    """`2026-12-02T12:41:51.250127+00:00` → `2026-12-02 12:41:51 UTC`."""
    return iso[:19].replace("T", " ") + (" UTC" if iso.endswith("+00:00") else "")


def json_type(value: Any) -> str:
    """How a JSON value's type reads in an error message (`a string`, `null`, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 3600 == 0:
        return f"{seconds / 86400:g}d"
    if seconds >= 3600 and seconds % 60 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
