"""One model step of a run: the `toren.call_model` activity, its retries and its budgets.

The activity gets a reference to the transcript, not the transcript (`TranscriptRef`): its
input stays small however long the conversation gets. What the call streamed too late to
publish comes back in its result and is published here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec
    from toren.agent._transcript import TranscriptRef
    from toren.agent._types import ModelCallInput, ModelCallResult, RunState
    from toren.errors import RunError
    from toren.workflows._budget import Budget
    from toren.workflows._context_window import ContextWindow
    from toren.workflows._model_activity import model_activity

__all__ = ["call_model"]

Message = dict[str, Any]


async def call_model(
    spec: AgentSpec,
    run: RunState,
    transcript: TranscriptRef,
    budget: Budget,
    publish: Callable[[str, dict[str, Any]], None],
    window: ContextWindow,
) -> ModelCallResult:
    """Ask the model for the next step's reply, within the run's budgets and its window.

    The window first compacts what the model is shown when the prompt would pass its
    threshold (`toren.workflows._context_window`); a refusal for length compacts and asks again,
    once a step.

    Raises:
        RunError: `ModelCallFailed` past the last attempt, or a budget the call would cross.
    """
    budget.check(spec)  # a child run's usage may have crossed it
    budget.before_call(spec, _since_last_reply(run.messages))
    plan = await window.before_call()
    try:
        reply = await model_activity(
            "toren.call_model",
            ModelCallInput(
                agent=spec.name,
                **transcript.for_model_call(),
                step=run.step,
                model=spec.model,
                context=plan,
            ),
            spec,
            f"model step {run.step} ({spec.model})",
        )
    except ActivityError as err:
        if await window.refused(err, run.step):
            return await call_model(spec, run, transcript, budget, publish, window)
        detail = str(err.cause) if err.cause else str(err)
        raise RunError(
            f"model call failed at step {run.step}: {detail}", kind="ModelCallFailed"
        ) from None
    for item in reply.live or ():
        # What the call had not yet streamed when it returned (it saved a signal), without
        # what the run knows (`toren.worker._live.TAIL_OMITS`).
        publish(str(item.get("type")), {"attempt": reply.attempt, **item})
    transcript.model_replied(reply.message)
    window.after_call(reply)
    budget.after_call(spec, reply)
    return reply


def _since_last_reply(messages: list[Message]) -> list[Message]:
    """The messages after the model's last reply (what the next prompt adds)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant" and not messages[i].get("queued"):
            return messages[i + 1 :]
    return messages
