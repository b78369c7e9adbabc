"""Deciding a run's waiting calls from a program: `decide`, `approve`, `deny`, `wait_for_approval`.

Re-exported by `toren.client`; the CLI, the HTTP API and `toren.testing` decide through these.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from toren.agent._types import Decision, PendingApproval
from toren.client._readable import ensure_readable
from toren.errors import ApprovalWaitError, UndecodablePayloadError

__all__ = ["approve", "decide", "deny", "wait_for_approval"]


async def decide(
    client: Client,
    run_id: str,
    call_id: str,
    approved: bool,
    *,
    by: str | None = None,
    comment: str = "",
    args: dict[str, Any] | None = None,
) -> Decision:
    """Approve or deny a waiting call through the `decide` update; returns the recorded decision.

    `args`: approve the call with these arguments instead of the model's (the whole object;
    the run checks it against the tool's schema and refuses a misfit, the call still waiting).

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the call is unknown or already decided
            (the message says which calls wait).
        UndecodablePayloadError: the run's payloads are encoded by a codec this client lacks;
            with `accepted` true the decision was recorded and only its answer is unreadable,
            else nothing was sent.
    """
    await ensure_readable(client, run_id)
    handle = client.get_workflow_handle(run_id)
    request = {
        "call_id": call_id,
        "approve": approved,
        "by": by or client.identity,
        "comment": comment,
        **({"args": args} if args is not None else {}),
    }
    try:
        decision: Decision = await handle.execute_update("decide", request, result_type=Decision)
    except UndecodablePayloadError as err:
        # The run recorded the decision; only its answer is unreadable here.
        raise UndecodablePayloadError(err.encoding, accepted=True) from None
    except WorkflowUpdateFailedError:
        # Not this run's call: one waiting in an agent tool's child is decided there.
        child = await _child_waiting(handle, call_id)
        if child is None:
            raise
        decision = await client.get_workflow_handle(child).execute_update(
            "decide", request, result_type=Decision
        )
    return decision


async def _child_waiting(handle: WorkflowHandle[Any, Any], call_id: str) -> str | None:
    """The run below `handle`'s (an agent tool's child) where call `call_id` waits, if any."""
    try:
        calls = await handle.query("pending_approvals", result_type=list[PendingApproval])
    except Exception:
        return None
    found = [c.run_id for c in calls if c.call_id == call_id and c.run_id not in ("", handle.id)]
    return found[0] if len(found) == 1 else None


async def approve(
    client: Client,
    run_id: str,
    call_id: str,
    *,
    by: str | None = None,
    comment: str = "",
    args: dict[str, Any] | None = None,
) -> Decision:
    """Approve a waiting call; it runs once, with its recorded args or the `args` given."""
    return await decide(client, run_id, call_id, True, by=by, comment=comment, args=args)


async def deny(
    client: Client, run_id: str, call_id: str, *, by: str | None = None, comment: str = ""
) -> Decision:
    """Deny a waiting call; the model sees `denied by <by>: <comment>`."""
    return await decide(client, run_id, call_id, False, by=by, comment=comment)


async def wait_for_approval(
    client: Client, run_id: str, *, timeout: float = 60.0, every: float = 0.2
) -> list[PendingApproval]:
    """Wait until at least one call of the run waits for a decision; return the waiting calls.

    `pending` answers at once, so right after `start_run` it is usually `[]`: the run has not
    reached its gated call yet. Use this before approving.

    Raises:
        ApprovalWaitError: no call waited within `timeout` seconds, or the run closed first.
    """
    handle = client.get_workflow_handle(run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        description = await handle.describe()
        if description.status not in (None, WorkflowExecutionStatus.RUNNING):
            if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
                raise ApprovalWaitError(
                    f"run {run_id!r} closed ({description.status.name.lower()}) "
                    "before any call waited for approval"
                )
        else:
            # A query waits for a worker; with none polling it would block past `timeout`.
            left = max(1.0, min(5.0, deadline - asyncio.get_running_loop().time()))
            try:
                calls: list[PendingApproval] = await handle.query(
                    "pending_approvals",
                    result_type=list[PendingApproval],
                    rpc_timeout=timedelta(seconds=left),
                )
            except RPCError:
                calls = []  # no worker answered yet
            if calls:
                return calls
        if asyncio.get_running_loop().time() >= deadline:
            raise ApprovalWaitError(
                f"no call of run {run_id!r} waited for approval within {timeout:g} s "
                f"(is a worker serving its task queue? `toren events {run_id}` shows where it is)"
            )
        await asyncio.sleep(every)
