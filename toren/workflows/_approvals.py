"""Approval bookkeeping inside `AgentRun`: pending calls, decisions, refused signals, details.

Pure workflow-side code. Signal handlers never raise: a payload that is empty, not a JSON
object, names no pending call, or decides a call twice is refused, recorded and logged, and the
run goes on waiting. A refusal is the safe answer: `{}` never approves the only pending call.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from toren.agent._schema import validate_args
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
    'Details>", "by": "<your name>", "comment": "<optional>", "args": {<optional: the '
    "arguments to run it with instead>}}"
)
DENY_HELP = (
    'Deny a waiting tool call; the model is told why. Data: {"call_id": "<id>", '
    '"by": "<your name>", "comment": "<reason>"}'
)
DECIDE_HELP = (
    'Approve or deny a waiting call and get the decision back. Data: {"call_id": "<id>", '
    '"approve": true, "by": "<your name>", "comment": "<optional>", "args": {<optional>}}'
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
        schema_of: Callable[[str], dict[str, Any] | None] = lambda tool: None,
    ) -> None:
        """Create the bookkeeping of one run.

        Args:
            refused: the run's list of refused signals (it lives in the run's `RunState`).
            on_change: called when calls start or stop waiting (keeps the inbox current).
            headline: what the run is and how far it got, above the approvals in the details
                (a run started by any client shows it, with or without a summary).
            schema_of: a tool's input schema by name, to check the arguments a person edits.
        """
        self._refused = refused
        self._on_change = on_change
        self._headline = headline
        self._schema_of = schema_of
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
        """Record `pending` as waiting and tell the Web UI.

        A call asked about again (edited into other approvers' reach) waits for a new decision.
        """
        self.decisions.pop(pending.call_id, None)
        self.pending[pending.call_id] = pending
        workflow.logger.info("tool call %s (%s) waits for approval", pending.call_id, pending.tool)
        self.publish()
        self._on_change()

    def decided(self, call_id: str) -> bool:
        """Whether `call_id` has a decision."""
        return call_id in self.decisions

    def expire(self, call_id: str, after_s: float, auto: str = "", rule: str = "") -> None:
        """Decide `call_id`: nobody did within `after_s` seconds. Denied, unless its rule approves.

        `auto`: what the call's `rule` decides at expiry (`approve`; anything else denies).
        """
        if call_id in self.decisions:
            return
        comment = f"approval expired after {_duration(after_s)}"
        if rule:
            comment += f"; rule {rule}: {'approve' if auto == 'approve' else 'deny'}"
        self.decisions[call_id] = Decision(
            call_id=call_id,
            approved=auto == "approve",
            by="toren",
            comment=comment,
            at=workflow.now().isoformat(),
            via="expiry",
            rule=rule,
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
        problem = self._problem(body, approving=kind == "approve")
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
            body = payload[0]
            approving = body.get("approve") if isinstance(body, dict) else None
            problem = self._problem(body, approving=approving is True)
            if problem is None and not isinstance(approving, bool):
                problem = 'field "approve" must be true or false'
        if problem is not None:
            # A misfit edit or a decider who may not decide: the payload's shape was right.
            shape = not problem.startswith('"args" do not') and " may not decide " not in problem
            raise ApplicationError(
                f"{problem}; send {DECIDE_EXAMPLE}" if shape else problem,
                type="InvalidDecision",
                non_retryable=True,
            )

    def on_update(self, payload: tuple[Any, ...]) -> Decision:
        """Apply an accepted `decide` update (its validator has checked `payload`)."""
        request = payload[0]
        return self._record(request, approved=bool(request["approve"]), via="update")

    def on_unknown_signal(self, name: str, payload: Any) -> None:
        """Refuse and record a signal no handler has (a misspelled `approve`, say)."""
        self._refuse(name, payload, unknown_signal_problem(name))

    def _problem(self, body: Any, approving: bool) -> str | None:
        call = self.pending.get(str(body.get("call_id"))) if isinstance(body, dict) else None
        return decision_problem(
            body,
            self.pending,
            self.decisions,
            approving=approving,
            approvers=call.approvers if call is not None else None,
            schema=self._schema_of(call.tool) if call is not None else None,
        )

    def _record(self, body: dict[str, Any], approved: bool, via: str) -> Decision:
        call = self.pending[body["call_id"]]
        edited = body.get("args")
        decision = Decision(
            call_id=body["call_id"],
            approved=approved,
            by=str(body.get("by") or "unknown"),
            comment=str(body.get("comment") or ""),
            at=workflow.now().isoformat(),
            via=via,
            args=edited if approved and edited is not None and edited != call.args else None,
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
        extra = self.extra_details()
        if not self.pending:
            text = "" if extra else "No tool call is waiting for approval."
        else:
            n = len(self.pending)
            parts = [f"## {n} tool call{'s' if n > 1 else ''} waiting for approval"]
            for p in self.pending.values():
                approve = json.dumps({"call_id": p.call_id, "by": "your-name", "comment": ""})
                deny = json.dumps({"call_id": p.call_id, "by": "your-name", "comment": "why"})
                edit = json.dumps({"call_id": p.call_id, "by": "your-name", "args": p.args})
                until = _short_time(p.expires_at) if p.expires_at else "never (waits until decided)"
                who = f"- **who may decide:** {', '.join(p.approvers)}\n" if p.approvers else ""
                rule = f"- **rule:** {p.rule}\n" if p.rule else ""
                edit_part = (
                    f"approve with changed arguments (edit `args`):\n```json\n{edit}\n```\n"
                    if len(edit) <= 1000
                    else ""
                )
                parts.append(
                    f"### `{p.tool}` - call `{p.call_id}`\n"
                    f"- **args:** `{json.dumps(p.args, ensure_ascii=False)[:1000]}`\n"
                    f"- **why gated:** {p.reason}\n"
                    f"{rule}{who}"
                    f"- **waiting since:** {_short_time(p.requested_at)}\n"
                    f"- **expires:** {until}\n\n"
                    "To decide: **More Actions > Send a Signal**, choose `approve` or `deny`, "
                    "paste into Data with your name in `by`, press Tab, then Submit:\n\n"
                    f"approve:\n```json\n{approve}\n```\n"
                    f"{edit_part}"
                    f"deny:\n```json\n{deny}\n```\n"
                    "Or **Send an Update** > `decide` with "
                    f'`{{"call_id": "{p.call_id}", "approve": true, "by": "your-name"}}` '
                    "for an immediate answer. Press **R** here to refresh after sending."
                )
            text = "\n\n".join(parts)
        text = f"{text}\n\n{extra}" if text and extra else text or extra
        if self._refused():
            last = self._refused()[-1]
            text += f"\n\n_Last refused signal ({last['signal']}): {last['reason']}_"
        return text


def unknown_signal_problem(name: str) -> str:
    """Why a signal named `name` is refused: no such signal, and the closest one."""
    close = difflib.get_close_matches(name, SIGNALS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (signals: {', '.join(SIGNALS)})"
    return f"unknown signal {name!r}{hint}"


def decision_problem(
    body: Any,
    pending: Collection[str],
    decided: Collection[str],
    approving: bool = True,
    approvers: list[str] | None = None,
    schema: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a decision payload must be refused, or `None` when it decides a waiting call.

    `approving`: it approves (only an approval may carry edited `args`); `approvers`: who may
    decide the call (`None`: anyone); `schema`: the tool's input schema, which edited `args`
    must fit. Shared by the workflow and the event-log renderer, so both tell the same story.
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
    if body.get("args") is not None:
        args = body["args"]
        if not approving:
            return '"args" changes a call a person approves; a denial takes none'
        if not isinstance(args, dict):
            return f'"args" must be a JSON object of the tool\'s arguments, got {json_type(args)}'
        problem = validate_args(dict(schema), args) if schema is not None else None
        if problem is not None:
            return f'"args" do not fit the tool\'s input: {problem}; the call still waits'
    if approvers is not None and body.get("by") not in approvers:
        who = repr(body["by"]) if body.get("by") else 'a decision without "by"'
        return f"{who} may not decide call {call_id!r}: its approvers are {', '.join(approvers)}"
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
