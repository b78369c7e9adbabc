"""The app's own Temporal code: a plain workflow that asks toren's agent, and an activity.

Nothing here imports toren: the workflow starts `AgentRun` by its type name with a JSON object,
as any Temporal SDK could. Kept apart from `app.py` (the worker and the starter) because
Temporal's sandbox imports a workflow's module afresh, and a script's `__main__` cannot be.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

TASK_QUEUE = "orders"
"""The app's queue; the agent's agent.yaml names it too, so one Worker serves it all."""


@activity.defn
async def issue_refund(order_id: str) -> str:
    """The app's own activity (a payment provider call, in a real app)."""
    return f"refund issued for {order_id}"


@workflow.defn
class RefundRequest:
    """The app's own workflow: ask the reviewer agent, then act on its typed answer."""

    @workflow.run
    async def run(self, order_id: str) -> dict[str, Any]:
        """Review `order_id` with the agent and refund it when the agent says so."""
        review: dict[str, Any] = await workflow.execute_child_workflow(
            "AgentRun",
            {"agent": "reviewer", "prompt": f"Customer asks for a refund of order {order_id}."},
            id=f"{workflow.info().workflow_id}/reviewer",
            task_queue=TASK_QUEUE,
            result_type=dict,
        )
        verdict = review["output"]  # the answer parsed against agent.yaml `output:` by toren
        outcome = "no refund"
        if verdict["refund"]:
            outcome = await workflow.execute_activity(
                issue_refund, order_id, start_to_close_timeout=timedelta(seconds=30)
            )
        return {"order_id": order_id, "reason": verdict["reason"], "outcome": outcome}
