"""Questions for a person inside `AgentRun`: `ask_human` and a handler's `ctx.ask`.

A question parks its call at zero compute, as a gated call does, until a person answers it or it
expires (the tool's `approval_timeout`, else the agent's `limits.approvalTimeoutMin`). Answers
come as the `answer` signal or update, `{"question_id", "text", "by"}`; a payload that is not an
object, names no waiting question, answers one twice, is empty or is not one of the question's
`choices` is refused and recorded (a signal) or rejected by the validator (the update), and the
question goes on waiting. Question ids are deterministic: `q_<call_id>_<n>`, the n-th question
of that call. A handler's `ctx.ask` stops its activity (`toren.agent._asking`); the call then
runs again with the answers so far. Workflow-side code: deterministic, no I/O.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import ToolSpec
    from toren.agent._types import Answer, PendingQuestion, RunState, ToolCallResult
    from toren.workflows._approvals import Approvals, json_type

__all__ = ["ANSWER_EXAMPLE", "ANSWER_HELP", "Questions", "answer_problem"]

ANSWER_EXAMPLE = '{"question_id": "<id>", "text": "<your answer>", "by": "<your name>"}'
ANSWER_HELP = (
    "Answer a question the run asks (User Metadata > Current Details shows it). Data: "
    + ANSWER_EXAMPLE
)
Publish = Callable[[str, dict[str, Any]], None]
Rerun = Callable[[list[dict[str, Any]]], Awaitable[ToolCallResult]]


class Questions:
    """The questions of one run's tool calls: waiting, answered, and the answers' refusals."""

    def __init__(self, run: RunState, approvals: Approvals, publish: Publish) -> None:
        """Keep the questions of `run`; its details and inbox count go through `approvals`."""
        self._run = run
        self._approvals = approvals
        self._publish = publish
        self.pending: dict[str, PendingQuestion] = {}
        self.answers: dict[str, Answer] = {}

    # -- the tools' side ---------------------------------------------------------------------

    async def ask_human(
        self, tool: ToolSpec, call_id: str, args: dict[str, Any]
    ) -> tuple[str, bool]:
        """Run the `ask_human` built-in: the answer as the result text, or why there is none."""
        choices = [str(c) for c in args.get("choices") or []] or None
        answer, after_s = await self.ask(tool, call_id, 1, str(args["question"]), choices, None)
        if answer is None:
            return f"nobody answered within {_duration(after_s)}", True
        return json.dumps({"answer": answer.text, "by": answer.by}, ensure_ascii=False), False

    async def answered(
        self, tool: ToolSpec, call_id: str, asked: ToolCallResult, answers: list[dict[str, Any]],
        rerun: Rerun,
    ) -> ToolCallResult:  # fmt: skip
        """A handler stopped at `ctx.ask`: wait for the answer, then run the call again."""
        request = asked.ask or {}
        choices = request.get("choices") or None
        answer, after_s = await self.ask(
            tool, call_id, len(answers) + 1, str(request.get("question") or ""),
            [str(c) for c in choices] if isinstance(choices, list) else None,
            request.get("timeout_s"),
        )  # fmt: skip
        entry = (
            {"text": answer.text, "by": answer.by}
            if answer is not None
            else {"expired": True, "after_s": after_s}
        )
        return await rerun([*answers, entry])

    async def ask(
        self, tool: ToolSpec, call_id: str, n: int, question: str, choices: list[str] | None,
        timeout_s: float | None,
    ) -> tuple[Answer | None, float]:  # fmt: skip
        """Park until `question` is answered or expires; the answer (None: expired), timeout."""
        assert self._run.spec is not None
        timeout_s = timeout_s or tool.approval_timeout_s or self._run.spec.approval_timeout_s
        question_id = f"q_{call_id}_{n}"
        if question_id in self.answers:  # a tool-use id the model used before in this run
            question_id = f"q_{call_id}-{self._run.step}_{n}"
        now = workflow.now()
        expires = (now + timedelta(seconds=timeout_s)).isoformat() if timeout_s else None
        self.pending[question_id] = PendingQuestion(
            question_id, question, call_id, tool.name, now.isoformat(), choices,
            self._run.step, expires,
        )  # fmt: skip
        workflow.logger.info("call %s (%s) asks %s", call_id, tool.name, question_id)
        self._approvals.changed()
        self._publish(
            "question_asked",
            {"question_id": question_id, "question": question, "choices": choices,
             "call_id": call_id, "name": tool.name, "expires_at": expires},
        )  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: question_id in self.answers,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"question of {tool.name} expires" if timeout_s else None,
            )
        self.pending.pop(question_id, None)
        self._approvals.changed()
        answer = self.answers.get(question_id)
        if answer is None:
            # Recorded as expired, so a late answer is refused as "already answered".
            self.answers[question_id] = Answer(
                question_id, "", "toren", workflow.now().isoformat(), via="expiry"
            )
        self._publish(
            "question_answered",
            {"question_id": question_id, "text": answer.text if answer else None,
             "by": answer.by if answer else None, "expired": answer is None},
        )  # fmt: skip
        return answer, float(timeout_s or 0)

    # -- the `answer` signal and update ------------------------------------------------------

    def on_signal(self, payload: tuple[Any, ...]) -> None:
        """Handle an `answer` signal; refuse and record anything that cannot be applied."""
        if len(payload) != 1:
            what = "an empty payload" if not payload else f"{len(payload)} values"
            self._refuse(payload, f"expected one JSON object, got {what}")
            return
        problem = self._problem(payload[0])
        if problem is not None:
            self._refuse(payload[0], problem)
            return
        self._record(payload[0], via="signal")

    def validate_update(self, payload: tuple[Any, ...]) -> None:
        """Reject an `answer` update that cannot be applied.

        Raises:
            ApplicationError: non-retryable, naming the field and what to send.
        """
        if len(payload) != 1:
            problem: str | None = f"expected one JSON object, got {len(payload)} arguments"
        else:
            problem = self._problem(payload[0])
        if problem is not None:
            raise ApplicationError(
                f"{problem}; send {ANSWER_EXAMPLE}", type="InvalidAnswer", non_retryable=True
            )

    def on_update(self, payload: tuple[Any, ...]) -> Answer:
        """Apply an accepted `answer` update (its validator checked `payload`)."""
        return self._record(payload[0], via="update")

    def pending_list(self) -> list[PendingQuestion]:
        """Waiting questions in the order they were asked."""
        return list(self.pending.values())

    def _problem(self, body: Any) -> str | None:
        return answer_problem(body, self.pending, self.answers)

    def _record(self, body: dict[str, Any], via: str) -> Answer:
        answer = Answer(
            question_id=body["question_id"],
            text=body["text"],
            by=str(body.get("by") or "unknown"),
            at=workflow.now().isoformat(),
            via=via,
        )
        self.answers[answer.question_id] = answer
        workflow.logger.info("question %s answered by %s", answer.question_id, answer.by)
        return answer

    def _refuse(self, payload: Any, reason: str) -> None:
        try:
            shown = json.dumps(payload, default=repr)
        except (TypeError, ValueError):
            shown = repr(payload)
        if len(shown) > 500:
            shown = shown[:500] + "..."
        self._run.refused.append(
            {
                "signal": "answer",
                "payload": shown,
                "reason": reason,
                "at": workflow.now().isoformat(),
            }
        )
        workflow.logger.warning("refused answer signal: %s (payload %s)", reason, shown)
        self._approvals.publish()

    # -- what the Web UI shows ---------------------------------------------------------------

    def details(self) -> str:
        """Markdown for the Web UI: each waiting question and exactly what to paste (ASCII)."""
        if not self.pending:
            return ""
        n = len(self.pending)
        parts = [f"## {n} question{'s' if n > 1 else ''} waiting for an answer"]
        for q in self.pending.values():
            example = {"question_id": q.question_id, "text": (q.choices or ["your answer"])[0]}
            paste = json.dumps({**example, "by": "your-name"})
            choices = ", ".join(f"`{c}`" for c in q.choices) if q.choices else "any text"
            until = q.expires_at[:19].replace("T", " ") if q.expires_at else "never"
            parts.append(
                f"### `{q.question_id}` - asked by `{q.tool}` (call `{q.call_id}`)\n"
                f"> {q.question[:1000]}\n\n"
                f"- **answers:** {choices}\n"
                f"- **expires:** {until}\n\n"
                "To answer: **More Actions > Send a Signal**, choose `answer`, paste into Data "
                f"with your answer in `text` and your name in `by`, then Submit:\n\n"
                f"```json\n{paste}\n```\n"
                "Or **Send an Update** > `answer` with the same data for an immediate answer."
            )
        return "\n\n".join(parts)


def answer_problem(
    body: Any, pending: dict[str, PendingQuestion], answered: dict[str, Answer]
) -> str | None:
    """Why an answer payload must be refused, or `None` when it answers a waiting question."""
    if not isinstance(body, dict):
        return f"expected a JSON object, got {json_type(body)}"
    question_id = body.get("question_id")
    waiting = ", ".join(pending) or "none"
    if question_id is not None and not isinstance(question_id, str):
        return f'"question_id" must be a string, got {json_type(question_id)}'
    if not question_id:
        return f'missing "question_id" (waiting: {waiting})'
    if question_id in answered:
        return f"question {question_id!r} was already answered"
    question = pending.get(question_id)
    if question is None:
        return f"unknown question_id {question_id!r} (waiting: {waiting})"
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        got = "an empty one" if isinstance(text, str) else json_type(text)
        return f'"text" must be a non-empty string (your answer), got {got}'
    if question.choices and text not in question.choices:
        return f'"text" must be one of the choices: {", ".join(map(repr, question.choices))}'
    if body.get("by") is not None and not isinstance(body["by"], str):
        return '"by" must be a string'
    return None


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 60 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
