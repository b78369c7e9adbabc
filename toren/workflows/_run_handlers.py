"""What a run answers from outside: approval signals and update, and its queries.

Temporal finds a workflow's handlers among its class's members, inherited ones included, so
`AgentRun` (and `AgentThread` through it) takes them from `RunHandlers`. Their names are part
of the contract (the Web UI, the CLI and the client send them): never rename one. A handler
never raises on a bad payload; `_approvals` refuses it and records why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from toren.agent._transcript import page_of
    from toren.agent._types import Answer, Decision, PendingApproval, PendingQuestion, RunState
    from toren.workflows import _approvals as approvals
    from toren.workflows._agent_tools import CHILD_APPROVAL_SIGNAL, child_path
    from toren.workflows._questions import ANSWER_HELP, Questions
    from toren.workflows._tool_calls import ToolCalls, flow_id

__all__ = ["RunHandlers"]

Message = dict[str, Any]


class RunHandlers:
    """The signals, update and queries of `AgentRun`, over the state it sets up."""

    _run: RunState
    _approvals: approvals.Approvals
    _executing: bool
    _calls: ToolCalls

    def _tool_schema(self, tool: str) -> dict[str, Any] | None:
        """A tool's recorded input schema (what an edited call's arguments must fit)."""
        spec = self._run.spec
        found = next((t for t in spec.tools if t.name == tool), None) if spec else None
        return found.schema if found is not None else None

    @workflow.signal(description=approvals.APPROVE_HELP)
    def approve(self, *payload: Any) -> None:
        """Approve a waiting call: `{"call_id": ..., "by": ..., "comment": ...}`."""
        self._approvals.on_signal("approve", payload)

    @workflow.signal(description=approvals.DENY_HELP)
    def deny(self, *payload: Any) -> None:
        """Deny a waiting call: `{"call_id": ..., "by": ..., "comment": ...}`."""
        self._approvals.on_signal("deny", payload)

    @workflow.update(description=approvals.DECIDE_HELP)
    def decide(self, *request: Any) -> Decision:
        """Approve or deny a waiting call and get the recorded decision back."""
        return self._approvals.on_update(request)

    @decide.validator
    def _validate_decide(self, *request: Any) -> None:
        # Takes any arguments, so a wrong shape gets toren's answer, not a Python TypeError.
        self._approvals.validate_update(request)

    @workflow.signal(dynamic=True)
    def _unknown_signal(self, name: str, args: Sequence[RawValue]) -> None:
        payload: list[Any] = []
        for arg in args:
            try:
                payload.append(workflow.payload_converter().from_payload(arg.payload))
            except Exception:  # a signal handler must never fail the workflow task
                payload.append("<undecodable payload>")
        self._approvals.on_unknown_signal(name, payload)

    @workflow.query(description="Calls waiting for a decision: call_id, tool, args, since when.")
    def pending_approvals(self) -> list[PendingApproval]:
        """The calls waiting for a person (and in agent tools' children, with `run_id`, `path`)."""
        own = self._approvals.pending_list()
        calls = getattr(self, "_calls", None)
        return own if calls is None else [*child_path(own, self._run), *calls.agent_tools.waiting()]

    @workflow.query(description="Approval signals refused (malformed, unknown call, decided).")
    def refused_signals(self) -> list[dict[str, Any]]:
        """Every refused approval signal, with why."""
        return list(self._run.refused)

    @workflow.query(
        description="A page of this run's part of the transcript, from index `start`, and the "
        "run before it (toren.call_model follows the chain)."
    )
    def transcript_segment(self, start: int = 0) -> dict[str, Any]:
        """`{"prior": {"run_id", "count", "digest"} | None, "total": n, "messages": [...]}`.

        A page stays under `SEGMENT_PAGE_BYTES`, so the answer fits Temporal's payload limit.
        """
        return {
            "prior": self._run.prior,
            "total": len(self._run.messages),
            "messages": page_of(self._run.messages, start),
        }

    @workflow.query(description="The messages this run holds, from index `start`.")
    def transcript(self, start: int = 0, end: int | None = None) -> list[Message]:
        """This run's messages (a continued run holds those since it continued)."""
        return self._run.messages[start:end]

    @workflow.query(description="The run's key-value state (ctx.get_value / ctx.set_value).")
    def state(self) -> dict[str, Any]:
        """The run's durable key-value state."""
        return dict(self._run.state)

    @workflow.query(description="Events tools emitted (ctx.emit), from index `offset`.")
    def events(self, offset: int = 0) -> list[dict[str, Any]]:
        """Emitted events from `offset` on, each with its index as `offset`."""
        return [{"offset": i, **e} for i, e in enumerate(self._run.events) if i >= offset]

    @workflow.query(
        description="The execution under way (flow_id, step_count, stopped, start), or null "
        "while a thread rests between messages."
    )
    def execution(self) -> dict[str, Any] | None:
        """The current execution; `None` at rest."""
        if not self._executing:
            return None
        return {
            "flow_id": flow_id(workflow.info().workflow_id, self._run),
            "current_side": "a",
            "step_count": self._run.step,
            "stopped": False,
            "start": self._run.execution_start,
            "context": dict(self._run.context),
        }

    @workflow.query(description="Step, tool calls and token usage so far.")
    def progress(self) -> dict[str, Any]:
        """How far the run is."""
        return {
            "step": self._run.step,
            "tool_calls": self._run.tool_calls,
            "usage": dict(self._run.usage),
            "pending": len(self._approvals.pending),
        }

    @workflow.signal(name=CHILD_APPROVAL_SIGNAL, description="toren's own: a child run's call "
                     "started or stopped waiting for a person (agents as tools).")  # fmt: skip
    def child_approval(self, *payload: Any) -> None:
        """A call in an agent tool's child started or stopped waiting (`_agent_tools`)."""
        calls = getattr(self, "_calls", None)
        if calls is not None:
            try:
                calls.agent_tools.on_child_approval(payload, self._run.refused)
            except Exception as err:  # a signal handler never fails the workflow task
                self._run.refused.append(
                    {"signal": CHILD_APPROVAL_SIGNAL, "payload": repr(payload)[:500],
                     "reason": f"{type(err).__name__}: {err}"[:300],
                     "at": workflow.now().isoformat()}
                )  # fmt: skip
        else:
            self._approvals.on_unknown_signal(CHILD_APPROVAL_SIGNAL, list(payload))

    # -- questions for a person (`toren.workflows._questions`) -------------------------------

    def _questions(self) -> Questions:
        """The questions of the execution under way (none yet: nothing waits)."""
        calls = getattr(self, "_calls", None)
        return (
            calls.questions
            if calls is not None
            else Questions(self._run, self._approvals, _no_publish)
        )

    def _questions_waiting(self) -> int:
        calls = getattr(self, "_calls", None)
        return len(calls.questions.pending) if calls is not None else 0

    @workflow.signal(name="answer", description=ANSWER_HELP)
    def answer(self, *payload: Any) -> None:
        """Answer a waiting question: `{"question_id": ..., "text": ..., "by": ...}`."""
        self._questions().on_signal(payload)

    @workflow.update(name="answer", description=ANSWER_HELP + " Returns the recorded answer.")
    def answer_update(self, *request: Any) -> Answer:
        """Answer a waiting question and get the recorded answer back."""
        return self._questions().on_update(request)

    @answer_update.validator
    def _validate_answer(self, *request: Any) -> None:
        self._questions().validate_update(request)

    @workflow.query(description="Questions waiting for a person's answer.")
    def pending_questions(self) -> list[PendingQuestion]:
        """The questions waiting for a person."""
        return self._questions().pending_list()


def _no_publish(type_: str, fields: dict[str, Any]) -> None:
    """Nothing is published before an execution starts."""
