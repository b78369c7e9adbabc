"""Which agent a run or thread belongs to, read from Temporal on each request.

The `agent` of the input the latest run started with: the agent the workflow checked in its
first task and runs as (a continued run's input is the workflow's own). Never the `TorenAgent`
search attribute: any client may set it when it starts a workflow, and until the run's first
task overwrites it, it named whatever agent the client chose. Nothing is cached: any replica
answers the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from toren import client as toren_client
from toren.client._events import read_through
from toren.client._readable import check_readable
from toren.web._auth import Access
from toren.web._errors import WebError

__all__ = ["Target", "decider", "speaker", "target"]

WORKFLOW_TYPES = ("AgentRun", "AgentThread")
MAX_ID = 1000


@dataclass(frozen=True)
class Target:
    """A run or thread a request may touch."""

    id: str
    agent: str
    workflow_type: str
    status: WorkflowExecutionStatus | None


async def target(
    client: Client, workflow_id: str, access: Access, *, thread_only: bool = False
) -> Target:
    """Describe `workflow_id`; refuse it when it is no toren run or its agent is not allowed.

    Raises:
        WebError: 404 when there is no such run (or thread), 403 when the token may not touch
            its agent.
        UndecodablePayloadError: the run's input is encoded and this server has no codec.
    """
    what = "thread" if thread_only else "run"
    if not workflow_id or len(workflow_id) > MAX_ID:
        raise WebError(404, f"no {what} has that id", field="id")
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise WebError(404, f"no {what} {workflow_id!r}", field="id") from None
        raise
    kinds = ("AgentThread",) if thread_only else WORKFLOW_TYPES
    if description.workflow_type not in kinds:
        raise WebError(404, f"{workflow_id!r} is not a toren {what}", field="id")
    agent = await _input_agent(client, workflow_id)
    if not access.allows(agent):
        raise WebError(403, f"this token may not touch runs of agent {agent!r}", field="id")
    return Target(workflow_id, agent, description.workflow_type, description.status)


async def _input_agent(client: Client, workflow_id: str) -> str:
    handle = client.get_workflow_handle(workflow_id)
    async for first in handle.fetch_history_events(page_size=1):
        await read_through([first], client.data_converter)
        # Encrypted and no codec here: say so (502 naming the settings), not "agent ''".
        check_readable(client.data_converter, [first])
        payloads = first.workflow_execution_started_event_attributes.input.payloads
        if len(payloads) == 1:
            try:
                raw = client.data_converter.payload_converter.from_payloads([payloads[0]])[0]
            except Exception:  # no JSON this side reads: the run refuses it too
                raw = None
            if isinstance(raw, dict) and isinstance(raw.get("agent"), str):
                return str(raw["agent"])
        break
    # An input without one agent fails the run at once (`InvalidRunInput`): nobody's agent.
    return ""


async def decider(client: Client, access: Access, run_id: str, request: Any) -> str:
    """Who a decision sent over HTTP is by: a named token's name, so `by` cannot be forged.

    A named token refuses a `by` other than its name. An unnamed token (or none, on an open
    server) decides as the `by` it sends (default `web`), except a call only named approvers
    may decide: for that it must be named, else anyone could write an approver's name.

    Raises:
        WebError: 403, saying which name the token has or how to give it one.
    """
    if access.identity is not None:
        return speaker(access, request.by)
    if not access.open:
        for call in await toren_client.pending(client, run_id):
            if call.call_id == request.call_id and call.approvers is not None:
                raise WebError(
                    403,
                    f"call {call.call_id!r} may be decided only by {', '.join(call.approvers)}, "
                    "and this token has no name: name it in TOREN_WEB_TOKENS as <name>@<token>",
                    field="by",
                )
    return str(request.by or "web")


def speaker(access: Access, by: str | None) -> str:
    """Who a request speaks as: a named token's name (refusing another `by`), else `by`/`web`.

    Raises:
        WebError: 403, a named token's request names someone else.
    """
    if access.identity is None:
        return by or "web"
    if by is not None and by != access.identity:
        raise WebError(
            403,
            f"this token decides as {access.identity!r}; leave out by or send that name",
            field="by",
        )
    return access.identity
