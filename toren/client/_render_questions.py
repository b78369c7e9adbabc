"""Questions for a person, rendered from history: asked, answered, or an answer refused.

QuestionAsked comes from the model's reply that calls `ask_human` (question id
`q_<tool-use id>_1`) or from a tool activity whose handler stopped at `ctx.ask` (its result's
`ask`; the n-th question of the call); QuestionAnswered from an `answer` signal the run took or
the `answer` update's recorded answer. An `answer` signal the run refused is a SignalRefused,
with the reason the workflow's own check gives (`toren.workflows._questions.answer_problem`).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from toren.agent._question_types import Answer, PendingQuestion
from toren.client._render_core import RenderState
from toren.workflows._questions import answer_problem

__all__ = ["QuestionEvents"]


class QuestionEvents(RenderState):
    """Questions asked of a person and their answers."""

    def _questions_state(self) -> tuple[dict[str, PendingQuestion], dict[str, Answer]]:
        if not hasattr(self, "_asked_questions"):
            self._asked_questions: dict[str, PendingQuestion] = {}
            self._answered_questions: dict[str, Answer] = {}
        return self._asked_questions, self._answered_questions

    def _asks_in_reply(self, event: HistoryEvent, result: dict[str, Any]) -> None:
        """QuestionAsked for each `ask_human` call of a model's reply."""
        message = result.get("message")
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            if not isinstance(call, dict) or call.get("name") != "ask_human":
                continue
            args = call.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    continue
            if isinstance(args, dict) and isinstance(args.get("question"), str):
                self._asked(event, f"q_{call.get('id')}_1", str(call.get("id")), "ask_human",
                            args["question"], args.get("choices"))  # fmt: skip

    def _asked_by_handler(
        self, event: HistoryEvent, tool: str, info: dict[str, Any], result: dict[str, Any]
    ) -> None:
        """QuestionAsked for a tool call whose handler stopped at `ctx.ask`."""
        ask = result.get("ask") or {}
        call_id = str(info.get("call_id") or "")
        n = len(info.get("answers") or []) + 1
        self._asked(event, f"q_{call_id}_{n}", call_id, tool, str(ask.get("question", "")),
                    ask.get("choices"))  # fmt: skip

    def _asked(
        self, event: HistoryEvent, question_id: str, call_id: str, tool: str, question: str,
        choices: Any,
    ) -> None:  # fmt: skip
        asked, _ = self._questions_state()
        choices = [str(c) for c in choices] if isinstance(choices, list) and choices else None
        asked[question_id] = PendingQuestion(question_id, question, call_id, tool, "", choices)
        self.emit(event, "QuestionAsked", questionId=question_id, callId=call_id, tool=tool,
                  question=question, choices=choices)  # fmt: skip

    def _answer_signal(self, event: HistoryEvent, values: list[Any], identity: str) -> None:
        asked, answered = self._questions_state()
        waiting = {k: v for k, v in asked.items() if k not in answered}
        body = values[0] if len(values) == 1 else None
        what = "an empty payload" if not values else f"{len(values)} values"
        reason = (
            answer_problem(body, waiting, answered)
            if len(values) == 1
            else f"expected one JSON object, got {what}"
        )
        if reason is not None or not isinstance(body, dict):
            self.emit(event, "SignalRefused", signal="answer", payload=values, reason=reason)
            return
        by = str(body.get("by") or identity or "unknown")
        self._question_answered(
            event, {"question_id": body["question_id"], "text": body["text"], "by": by}, "signal"
        )

    def _question_answered(self, event: HistoryEvent, outcome: dict[str, Any], via: str) -> None:
        _, answered = self._questions_state()
        question_id = str(outcome.get("question_id", ""))
        text, by = str(outcome.get("text", "")), str(outcome.get("by", ""))
        answered[question_id] = Answer(question_id, text, by, "", via)
        self.emit(event, "QuestionAnswered", questionId=question_id, text=text, by=by, via=via)
