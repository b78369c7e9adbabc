"""What a run's Temporal history says: each activity's attempts and outcome, task failures.

The harness compares this (what Temporal recorded) with the record files (what the handlers
actually did) to find calls that ran again after their completion was recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

__all__ = ["ActivityOutcome", "RunHistory", "fetch_run_history"]


@dataclass
class ActivityOutcome:
    """One scheduled activity: its type, input, final attempt and how it ended."""

    activity_type: str
    input: dict[str, Any]
    scheduled_at: float
    attempt: int = 0
    """The attempt that closed it (Temporal writes the started event only when it closes)."""
    started_at: float | None = None
    """When that last attempt started."""
    outcome: str = "open"
    """completed, failed, timed_out, canceled or open."""
    closed_at: float | None = None
    failure: str = ""

    @property
    def call_id(self) -> str:
        """The tool-use id of a tool call ('' for other activities)."""
        return str(self.input.get("call_id", ""))


@dataclass
class RunHistory:
    """The facts the harness needs from one run's history."""

    workflow_id: str
    status: str = "running"
    activities: list[ActivityOutcome] = field(default_factory=list)
    workflow_task_failures: int = 0
    workflow_task_timeouts: int = 0
    failure_type: str = ""

    def tool_calls(self) -> dict[str, ActivityOutcome]:
        """Tool-call activities by tool-use id (the harness's scripts never reuse an id)."""
        return {a.call_id: a for a in self.activities if a.call_id and "." in a.activity_type}

    def model_calls(self) -> list[ActivityOutcome]:
        """The `toren.call_model` activities, in order."""
        return [a for a in self.activities if a.activity_type == "toren.call_model"]


def _first_payload(payloads: Payloads | None) -> dict[str, Any]:
    # The pydantic data converter writes JSON; reading it raw keeps this independent of
    # toren's dataclasses, which other engineers may be changing.
    if payloads is None or not payloads.payloads:
        return {}
    try:
        value = json.loads(payloads.payloads[0].data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def analyse(workflow_id: str, history: WorkflowHistory) -> RunHistory:
    """Reduce `history` to a `RunHistory`."""
    run = RunHistory(workflow_id)
    by_scheduled: dict[int, ActivityOutcome] = {}
    for event in history.events:
        kind = event.event_type
        when = event.event_time.ToDatetime().timestamp() if event.HasField("event_time") else 0.0
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            outcome = ActivityOutcome(attrs.activity_type.name, _first_payload(attrs.input), when)
            by_scheduled[event.event_id] = outcome
            run.activities.append(outcome)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            act = by_scheduled[started.scheduled_event_id]
            act.attempt, act.started_at = started.attempt, when
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = by_scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]
            done.outcome, done.closed_at = "completed", when
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs_f = event.activity_task_failed_event_attributes
            done = by_scheduled[attrs_f.scheduled_event_id]
            done.outcome, done.closed_at = "failed", when
            done.failure = attrs_f.failure.message
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            attrs_t = event.activity_task_timed_out_event_attributes
            done = by_scheduled[attrs_t.scheduled_event_id]
            done.outcome, done.closed_at = "timed_out", when
            done.failure = attrs_t.failure.message
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
            attrs_c = event.activity_task_canceled_event_attributes
            done = by_scheduled[attrs_c.scheduled_event_id]
            done.outcome, done.closed_at = "canceled", when
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            run.workflow_task_failures += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            run.workflow_task_timeouts += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            run.status = "completed"
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            run.status = "failed"
            failure = event.workflow_execution_failed_event_attributes.failure
            run.failure_type = failure.application_failure_info.type
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            run.status = "timed_out"
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            run.status = "terminated"
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            run.status = "canceled"
    return run


async def fetch_run_history(client: Client, workflow_id: str) -> RunHistory:
    """Fetch and analyse the history of `workflow_id`."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return analyse(workflow_id, history)
