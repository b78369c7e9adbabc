"""What a live run waits for, in one line a person can act on (`toren run` prints it).

The history says nothing while a model call is retried or a tool runs: Temporal writes an
activity's events when it ends. The server's description of the run does know (its pending
activities: attempt, last failure, when the next attempt starts, since when one runs), and the
workflow's `pending_approvals` query knows who waits for a person:

```
model call failed (HTTP 500), attempt 4/10, next in 8 s
tool bash running 41 s of 120 s
waiting for approval of refund_order (call_ab12) — approve with: toren approve RUN call_ab12
no worker polls task queue support; start one with: toren worker examples/support
```
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionDescription

from toren.agent._attempts import failure_record

__all__ = ["NO_WORKER_AFTER_S", "activity_lines", "pasteable", "toren_command", "watch"]

NO_WORKER_AFTER_S = 5.0
"""How long a workflow task may wait unstarted before the run is said to have no worker."""

REPEAT_S = 15.0
"""A line that only counts time (`running 41 s`) is printed again this often, not each second."""


def pasteable(command: str) -> str:
    """`command` (a `toren` or `temporal` CLI line) as a line to paste into another terminal.

    With this shell's `TEMPORAL_ADDRESS` and `TEMPORAL_NAMESPACE` in front when they are set:
    another terminal without them would ask the default server for a run it does not have.
    """
    env = [
        f"{name}={shlex.quote(value)} "
        for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE")
        if (value := os.environ.get(name))
    ]
    return "".join(env) + command


def toren_command(args: str) -> str:
    """`toren ARGS`, `pasteable`."""
    return pasteable(f"toren {args}")


def _seconds(ts: Any) -> float | None:
    if ts is None or not ts.seconds:
        return None
    return float(ts.seconds) + float(ts.nanos) / 1e9


def _duration(d: Any) -> float | None:
    return float(d.seconds) + d.nanos / 1e9 if d is not None and (d.seconds or d.nanos) else None


def _failure_reason(failure: Any, decode: Callable[[Any], list[Any]]) -> str:
    records = failure_record(failure, decode)
    status = records[-1].get("status") if records else None
    if status:
        return f"HTTP {status}"
    text: str = failure.message or "error"
    return text if len(text) <= 80 else text[:77] + "…"


def activity_lines(
    description: WorkflowExecutionDescription, now: float, decode: Callable[[Any], list[Any]]
) -> list[tuple[str, str]]:
    """(key, line) for each pending activity; the key leaves out what only counts time."""
    lines = []
    for pending in description.raw_description.pending_activities:
        name = pending.activity_type.name
        what = "model call" if name == "toren.call_model" else None
        if what is None and "." in name and not name.startswith("toren."):
            what = f"tool {name.split('.', 1)[1]}"
        if what is None:
            continue
        of = f"/{pending.maximum_attempts}" if pending.maximum_attempts else ""
        started = _seconds(pending.last_started_time)
        if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED and started:
            timeout = _duration(pending.activity_options.start_to_close_timeout)
            limit = f" of {timeout:.0f} s" if timeout else ""
            attempt = f" (attempt {pending.attempt}{of})" if pending.attempt > 1 else ""
            key = f"{what} running{limit}{attempt}"
            lines.append((key, f"{what} running {now - started:.0f} s{limit}{attempt}"))
        elif pending.HasField("last_failure") and pending.attempt > 1:
            reason = _failure_reason(pending.last_failure, decode)
            key = f"{what} failed ({reason}), attempt {pending.attempt}{of}"
            following = _seconds(pending.next_attempt_schedule_time)
            when = f", next in {max(0, following - now):.0f} s" if following else ""
            lines.append((key, key + when))
    return lines


async def _has_pollers(client: Client, task_queue: str) -> bool:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(response.pollers)


async def watch(
    client: Client,
    run_id: str,
    say: Callable[[str], None],
    *,
    agent_dir: str = "<agent folder>",
    every: float = 1.0,
) -> None:
    """Say what the run waits for whenever that changes, until cancelled."""
    handle = client.get_workflow_handle(run_id)
    converter = client.data_converter.payload_converter

    def decode(payloads: Any) -> list[Any]:
        try:
            return list(converter.from_payloads(list(payloads.payloads)))
        except Exception:
            return []

    shown: dict[str, float] = {}
    told_no_worker = False
    while True:
        await asyncio.sleep(every)
        try:
            description = await handle.describe()
        except Exception:  # a hiccup of the server: try again on the next tick
            continue
        if description.raw_description.workflow_execution_info.HasField("close_time"):
            continue  # the event stream moves on to the next run of the chain, or ends
        now = datetime.now(UTC).timestamp()
        lines = activity_lines(description, now, decode)
        raw = description.raw_description
        task = raw.pending_workflow_task if raw.HasField("pending_workflow_task") else None
        scheduled = _seconds(task.scheduled_time) if task else None
        unstarted = (
            task is not None
            and task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
            and scheduled is not None
            and now - scheduled > NO_WORKER_AFTER_S
        )
        if unstarted and not told_no_worker:
            queue = description.task_queue
            served = True
            with contextlib.suppress(Exception):  # not allowed to describe queues: say nothing
                served = await _has_pollers(client, queue)
            if not served:
                told_no_worker = True
                say(
                    f"no worker polls task queue {queue}; the run waits until one does. "
                    f"Start one with: toren worker {agent_dir}"
                )
        waiting: list[Any] = []
        if not unstarted:  # a query waits for a worker; with none it would hang here
            try:
                waiting = await asyncio.wait_for(handle.query("pending_approvals"), 5)
            except Exception:  # a worker busy or gone: ask again on the next tick
                waiting = []
        for call in waiting or []:
            call_id, tool = call.get("call_id"), call.get("tool")
            line = f"waiting for approval of {tool} ({call_id}) — approve with: " + toren_command(
                f"approve {run_id} {call_id}"
            )
            lines.append((line, line))
        for key, line in lines:
            last = shown.get(key)
            if last is None or (line != key and now - last >= REPEAT_S):
                shown[key] = now
                say(line)
        current = {key for key, _ in lines}
        shown = {k: v for k, v in shown.items() if k in current}
