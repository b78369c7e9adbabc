"""What the console lists: who the token is (`/v1/me`), its agents, and runs from visibility.

```
GET /v1/runs?agent=support&status=waiting&type=run&limit=20
{"runs": [{"run_id": "support-1a2b", "agent": "support", "status": "waiting", ...}], "next": "..."}
```

The runs come from Temporal's visibility with toren's search attributes (`TorenAgent`,
`TorenStatus`, `TorenPendingApprovals`): one listing per page, no history read. Every query is
built here from validated values (agent names are `[a-z][a-z0-9_]*`, each single-quoted), and a
scoped token's agents are always part of it, whatever the filters say: no raw query reaches
Temporal. The agent of a row is `TorenAgent`: a run's first task sets it to the agent it runs as,
so only a run no worker has started yet can show the agent its starter named (the run's own
endpoints check the agent of its input, `toren.web._access`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.converter import decode_typed_search_attributes
from temporalio.service import RPCError, RPCStatusCode

from toren.client._memo import PROMPT_MEMO_KEY
from toren.connect import _search_attributes as search_attributes
from toren.web import _models as m
from toren.web._auth import Access
from toren.web._errors import WebError

__all__ = ["Listing", "runs_query"]

_AGENT = re.compile(m.AGENT)
_LIMIT = re.compile(r"[0-9]{1,3}")
_PAGE = re.compile(r"[A-Za-z0-9_-]{1,4000}={0,2}")
BASE = "WorkflowType IN ('AgentRun', 'AgentThread') AND ExecutionStatus != 'ContinuedAsNew'"
"""Every toren run and thread, once each (a continued execution's earlier runs are left out)."""
STATUSES = {
    "running": "ExecutionStatus = 'Running' "
    "AND (TorenStatus IS NULL OR TorenStatus != 'waiting_approval')",
    "waiting": "ExecutionStatus = 'Running' AND TorenStatus = 'waiting_approval'",
    "completed": "ExecutionStatus = 'Completed'",
    "failed": "ExecutionStatus = 'Failed'",
    "canceled": "ExecutionStatus = 'Canceled'",
    "terminated": "ExecutionStatus = 'Terminated'",
    "timed_out": "ExecutionStatus = 'TimedOut'",
}
TYPES = {"run": "AgentRun", "thread": "AgentThread"}
DEFAULT_LIMIT = 50
MAX_LIMIT = 100
AGENTS_DAYS = 30
"""`/v1/agents` (for an unscoped token) names the agents of runs started this many days back."""
MAX_AGENTS = 200


def _quoted(agent: str) -> str:
    """`agent` as a query literal; only an agent name (no quote can be in one) gets here."""
    if not _AGENT.fullmatch(agent):
        raise ValueError(f"not an agent name: {agent!r}")
    return f"'{agent}'"


def _agents_clause(agents: Iterable[str], op: str = "IN") -> str:
    return f"TorenAgent {op} ({', '.join(_quoted(a) for a in sorted(agents))})"


def runs_query(access: Access, agent: str | None, status: str | None, kind: str | None) -> str:
    """The visibility query for `GET /v1/runs`, from checked values only."""
    clauses = [BASE]
    if access.agents is not None:
        clauses.append(_agents_clause(access.agents))
    if agent is not None:
        clauses.append(f"TorenAgent = {_quoted(agent)}")
    if status is not None:
        clauses.append(f"({STATUSES[status]})")
    if kind is not None:
        clauses.append(f"WorkflowType = '{TYPES[kind]}'")
    return " AND ".join(clauses)


def _choice(request: Request, name: str, choices: Iterable[str]) -> str | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    options = list(choices)
    if value not in options:
        raise WebError(400, f"{name} must be one of {', '.join(options)}", field=name)
    return value


def _agent_param(request: Request, access: Access) -> str | None:
    agent = request.query_params.get("agent")
    if agent is None:
        return None
    if len(agent) > 100 or not _AGENT.fullmatch(agent):
        raise WebError(400, f"agent {agent[:100]!r} is not an agent name", field="agent")
    if not access.allows(agent):
        raise WebError(403, f"this token may not touch runs of agent {agent!r}", field="agent")
    return agent


def _limit_param(request: Request) -> int:
    value = request.query_params.get("limit")
    if value is None:
        return DEFAULT_LIMIT
    if not _LIMIT.fullmatch(value) or not 1 <= int(value) <= MAX_LIMIT:
        raise WebError(400, f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
    return int(value)


def _page_param(request: Request) -> bytes | None:
    value = request.query_params.get("next")
    if value is None:
        return None
    bad = WebError(400, "next must be the `next` of a previous page, as it came", field="next")
    if not _PAGE.fullmatch(value):
        raise bad
    try:
        return base64.urlsafe_b64decode(value)
    except (binascii.Error, ValueError):
        raise bad from None


async def _prompt(client: Client, info: WorkflowExecutionInfo) -> str:
    """The first line of the run's prompt, from the memo `toren.client.start_run` sets.

    "" for a run started otherwise, a thread, or a memo this server's codec cannot read.
    """
    payload = info.memo.fields.get(PROMPT_MEMO_KEY)
    if payload is None:
        return ""
    try:
        [text] = await client.data_converter.decode([payload])  # the codec, then the value
    except Exception:  # an encoded memo without the codec: the row goes without its prompt
        return ""
    return text[:200] if isinstance(text, str) else ""


def summary(info: WorkflowExecutionInfo, prompt: str = "") -> m.RunSummary:
    """One row of the run list, from what visibility holds of the run."""
    attributes = decode_typed_search_attributes(info.search_attributes)
    status = WorkflowExecutionStatus(info.status) if info.status else None
    running = status in (None, WorkflowExecutionStatus.RUNNING)
    if running:
        waiting = attributes.get(search_attributes.STATUS_KEY) == "waiting_approval"
        name = "waiting" if waiting else "running"
    else:
        assert status is not None
        name = status.name.lower()
    closed = info.close_time.ToDatetime(UTC) if info.HasField("close_time") else None
    return m.RunSummary(
        run_id=info.execution.workflow_id,
        agent=attributes.get(search_attributes.AGENT_KEY) or "",
        workflow_type=info.type.name,
        status=name,
        waiting=(attributes.get(search_attributes.PENDING_KEY) or 0) if running else 0,
        started_at=info.start_time.ToDatetime(UTC).isoformat(),
        closed_at=None if closed is None else closed.isoformat(),
        prompt=prompt,
    )


class Listing:
    """`/v1/me`, `/v1/agents` and `GET /v1/runs`, over a Temporal client."""

    def __init__(self, client: Callable[[], Awaitable[Client]]) -> None:
        self._client = client

    async def me(self, request: Request) -> Response:
        """`GET /v1/me`: the token's name, its agents and whether the server runs open."""
        access: Access = request.state.access
        agents = None if access.agents is None else sorted(access.agents)
        return _json(m.Me(identity=access.identity, agents=agents, open=access.open))

    async def agents(self, request: Request) -> Response:
        """`GET /v1/agents`: a scoped token's agents; else those of recent runs and threads."""
        access: Access = request.state.access
        if access.agents is not None:
            return _json(m.AgentList(agents=sorted(access.agents)))
        client = await self._client()
        since = (datetime.now(UTC) - timedelta(days=AGENTS_DAYS)).strftime("%Y-%m-%dT%H:%M:%SZ")
        found: set[str] = set()
        # One listing of one run per agent: each asks for a run of an agent not yet found, so
        # the cost is the number of agents, not of runs.
        while len(found) < MAX_AGENTS:
            query = f"{BASE} AND StartTime > '{since}' AND TorenAgent IS NOT NULL"
            if found:
                query += f" AND {_agents_clause(found, 'NOT IN')}"
            name = None
            async for execution in client.list_workflows(query, limit=1, page_size=1):
                name = execution.typed_search_attributes.get(search_attributes.AGENT_KEY)
            if name is None or not _AGENT.fullmatch(name) or name in found:
                break
            found.add(name)
        return _json(m.AgentList(agents=sorted(found)))

    async def runs(self, request: Request) -> Response:
        """`GET /v1/runs?agent=&status=&type=&limit=&next=`: newest first, a page at a time."""
        access: Access = request.state.access
        agent = _agent_param(request, access)
        status = _choice(request, "status", STATUSES)
        kind = _choice(request, "type", TYPES)
        limit = _limit_param(request)
        page = _page_param(request)
        client = await self._client()
        request_page = ListWorkflowExecutionsRequest(
            namespace=client.namespace,
            page_size=limit,
            next_page_token=page or b"",
            query=runs_query(access, agent, status, kind),
        )
        try:
            # A page token is the client's word: not retried, as a garbage one fails each time.
            found = await client.workflow_service.list_workflow_executions(
                request_page, retry=page is None, timeout=timedelta(seconds=30)
            )
        except RPCError as err:
            refused = (RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.UNKNOWN)
            if page is not None and err.status in refused:
                raise WebError(
                    400,
                    "next is no page token of this server's; start again without it",
                    field="next",
                ) from None
            raise
        token = found.next_page_token
        return _json(
            m.RunList(
                runs=[summary(info, await _prompt(client, info)) for info in found.executions],
                next=base64.urlsafe_b64encode(token).decode() if token else None,
            )
        )


def _json(model: BaseModel) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"))
