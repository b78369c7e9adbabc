"""`ctx.ask`: a tool handler asks a person and goes on with the answer.

A handler runs in an activity, which cannot wait days for a person at zero compute. So asking
works the way LangGraph's `interrupt` does: the first time, `ctx.ask` stops the handler (an
internal exception the activity runtime turns into a `ToolCallResult` with `ask` set); the run
parks on the question (`toren.workflows._questions`) and, once answered, runs the same call
again with the answers so far (`ToolCallInput.answers`). The handler starts over from the top,
and each `ctx.ask` returns its recorded answer, in order, until the next unanswered one.

```python
async def refund(args, ctx):
    order = await lookup(args.order_id)                       # runs again on every re-run
    how = await ctx.ask(f"Refund {order.total} to card or credit?", choices=["card", "credit"])
    note = await ctx.ask("A note for the customer?")
    return await pay_refund(order, how, note, key=ctx.idempotency_key)   # runs once
```
"""

from __future__ import annotations

import contextvars
from datetime import timedelta
from typing import Any

from toren.errors import QuestionExpired, TorenError

__all__ = ["AskPending", "Asking", "current_answers"]

current_answers: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "toren_answers", default=None
)
"""The answers of the call running in this context (`ToolCallInput.answers`) and how many of
them `ctx.ask` has returned so far; the activity runtime sets it around each call."""


class AskPending(TorenError):  # noqa: N818 - not an error: the handler stops to ask
    """Raised by `ctx.ask` for a question not answered yet; the activity runtime catches it.

    Internal (in the tree so nothing escapes it): a handler should let it pass (a bare `except
    Exception:` or `except TorenError:` around `ctx.ask` would swallow it, and the call would
    finish without asking).
    """

    def __init__(self, question: str, choices: list[str] | None, timeout_s: float | None) -> None:
        super().__init__(f"waiting for a person's answer to {question!r}")
        self.request = {"question": question, "choices": choices, "timeout_s": timeout_s}


class Asking:
    """`ToolContext.ask` (a mixin, so the context's own module stays about the context)."""

    async def ask(
        self,
        question: str,
        choices: list[str] | None = None,
        timeout: float | timedelta | None = None,
    ) -> str:
        """Ask a person `question` and return their answer's text.

        The run parks at zero compute until someone answers (`toren answer`, the HTTP API,
        the `answer` signal or update, `toren chat`); `choices` restricts the answers accepted.
        `timeout` (seconds or a `timedelta`) defaults to the tool's `approval_timeout`, then the
        agent's `limits.approvalTimeoutMin`, then no limit.

        **The handler runs again from the start after each answer**, with the same
        `ctx.idempotency_key`: code before a `ctx.ask` runs once per question asked. Put
        effects (a payment, an email) after the last `ctx.ask`, or make them idempotent.
        State, events and messages recorded before an unanswered `ctx.ask` are dropped (the
        re-run records them again). Let the internal exception that stops the handler pass:
        do not wrap `ctx.ask` in a bare `except Exception:`.

        Raises:
            QuestionExpired: nobody answered within the timeout (raised on the re-run).
            ValueError: an empty question, choices that are not strings, or a timeout <= 0.
            RuntimeError: outside a run.
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("ctx.ask(question): the question must be a non-empty string")
        if choices is not None and (
            not isinstance(choices, list | tuple)
            or not choices
            or not all(isinstance(c, str) and c for c in choices)
        ):
            raise ValueError("ctx.ask(choices=...): a non-empty list of non-empty strings, or None")
        timeout_s = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if timeout_s is not None and (not isinstance(timeout_s, int | float) or timeout_s <= 0):
            raise ValueError(f"ctx.ask(timeout=...): a positive number of seconds, got {timeout!r}")
        answers = current_answers.get()
        if answers is None:
            raise RuntimeError("ctx.ask needs a run (no run in this context)")
        asked = sum(1 for a in answers if a.get("returned"))
        if asked < len(answers):
            answer = answers[asked]
            answer["returned"] = True
            if answer.get("expired"):
                raise QuestionExpired(
                    f"nobody answered {question!r} within {answer.get('after_s', 0):g} s"
                )
            return str(answer.get("text", ""))
        raise AskPending(question, list(choices) if choices else None, timeout_s)
