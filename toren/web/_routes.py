"""The handlers: each reads the request, asks Temporal through `toren.client`, answers JSON.

Nothing is remembered between requests (no session, no cache), so any replica of the app
answers any request the same.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import from_json
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from toren import client as toren_client
from toren.agent._question_types import PendingQuestion
from toren.errors import UndecodablePayloadError
from toren.web import _models as m
from toren.web._access import Target, decider, speaker, target
from toren.web._auth import Access
from toren.web._errors import WebError
from toren.web._sse import check_stream, sse_events, start_offset

__all__ = ["Handlers"]

Model = TypeVar("Model", bound=BaseModel)
MAX_BODY = 4_000_000
"""Room for the largest valid body (100 000 astral characters escaped in JSON take 1.2 MB)."""
MAX_DEPTH = 64
"""Nesting a body may have (the body object is level 1). A run's input nests the body's
`arguments` a level deeper, its state a few more, and the worker's JSON decoder stops at 200:
deeper, the run could never read its own input."""
_UINT = re.compile(r"[0-9]{1,9}")


async def _read(request: Request) -> bytes:
    """The request's body, read only up to `MAX_BODY` (a chunked body has no length to check).

    Raises:
        WebError: 413 as soon as the body passes `MAX_BODY`.
    """
    too_large = WebError(413, f"body over {MAX_BODY} bytes", field="body")
    length = request.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and (len(length) > 9 or int(length) > MAX_BODY):
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _too_deep(value: Any, levels: int) -> bool:
    """Whether `value` nests objects and lists more than `levels` deep (without recursing)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > levels:
                return True
            stack += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return False


async def body(request: Request, model: type[Model]) -> Model:
    """The request's JSON body as `model`.

    Raises:
        WebError: 413 for a body over `MAX_BODY`, 400 for one that is not a JSON object or
            nests deeper than `MAX_DEPTH`; pydantic's `ValidationError` (answered 422 naming
            the field) for one that does not fit.
    """
    raw = await _read(request)
    try:
        # Not `json.loads`: it recurses, and a body nested 1,000 deep raised `RecursionError`.
        # This parser stops at 200 levels with a `ValueError`, and refuses a lone surrogate
        # (`"\\ud800"`), which no protobuf string can carry.
        data = from_json(raw)
    except ValueError as err:
        raise WebError(400, f"body is not valid JSON text: {err}", field="body") from None
    if not isinstance(data, dict):
        raise WebError(400, "body must be a JSON object", field="body")
    for key, value in data.items():
        if _too_deep(value, MAX_DEPTH - 1):
            raise WebError(
                400, f"{key!r} nests deeper than {MAX_DEPTH} levels; flatten it", field=str(key)
            )
    return model.model_validate(data)


def _query_int(request: Request, name: str, default: int | None) -> int | None:
    value = request.query_params.get(name)
    if value is None:
        return default
    # ASCII digits only: `str.isdigit` takes `²` (which `int` refuses) and `٣` (which it reads).
    if not _UINT.fullmatch(value):
        raise WebError(400, f"{name} must be a non-negative integer (digits 0-9)", field=name)
    return int(value)


def _out(model: BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status)


class Handlers:
    """The endpoints, over a Temporal client (given, or connected on first use)."""

    def __init__(self, client: Callable[[], Awaitable[Client]]) -> None:
        self._client = client

    async def _target(self, request: Request, *, thread_only: bool = False) -> Target:
        access: Access = request.state.access
        return await target(
            await self._client(), request.path_params["id"], access, thread_only=thread_only
        )

    def _allow_agent(self, request: Request, agent: str) -> None:
        access: Access = request.state.access
        if not access.allows(agent):
            raise WebError(403, f"this token may not touch agent {agent!r}", field="agent")

    async def start_run(self, request: Request) -> Response:
        """`POST /v1/runs`."""
        req = await body(request, m.StartRun)
        self._allow_agent(request, req.agent)
        handle = await toren_client.start_run(
            await self._client(),
            req.agent,
            req.prompt,
            run_id=req.run_id,
            arguments=req.arguments,
            attachments=req.attachments,
        )
        return _out(m.RunStarted(run_id=handle.id, agent=req.agent), 201)

    async def status(self, request: Request, thread_only: bool = False) -> Response:
        """`GET /v1/runs/{id}` (a run or a thread) and `GET /v1/threads/{id}`."""
        found = await self._target(request, thread_only=thread_only)
        status = found.status or WorkflowExecutionStatus.RUNNING
        result = None
        if status == WorkflowExecutionStatus.COMPLETED:
            client = await self._client()
            raw = await client.get_workflow_handle(found.id).result()
            result = raw if isinstance(raw, dict | list | str | int | float) else None
        return _out(
            m.RunStatus(
                id=found.id,
                agent=found.agent,
                workflow_type=found.workflow_type,
                status=status.name.lower(),
                result=result,
                pending_questions=await self._questions(found.id, status),
            )
        )

    async def start_thread(self, request: Request) -> Response:
        """`POST /v1/threads`."""
        req = await body(request, m.StartThread)
        self._allow_agent(request, req.agent)
        handle = await toren_client.start_thread(
            await self._client(),
            req.agent,
            thread_id=req.thread_id,
            user_id=req.user_id,
            arguments=req.arguments,
        )
        return _out(m.ThreadStarted(thread_id=handle.id, agent=req.agent), 201)

    async def send_message(self, request: Request) -> Response:
        """`POST /v1/threads/{id}/messages`: waits for the answer unless `wait` is false."""
        req = await body(request, m.SendMessage)
        found = await self._target(request, thread_only=True)
        if found.status not in (None, WorkflowExecutionStatus.RUNNING):
            raise WebError(409, f"thread {found.id!r} is closed; start a new one", field="id")
        outcome = await toren_client.send_message(
            await self._client(),
            found.id,
            req.content,
            attachments=req.attachments,
            message_id=req.message_id,
            wait=req.wait,
        )
        if not req.wait:
            return _out(m.Queued.model_validate(outcome), 202)
        return JSONResponse(m.Answer.model_validate(outcome).model_dump(mode="json"))

    async def messages(self, request: Request) -> Response:
        """`GET /v1/threads/{id}/messages?start=&limit=`."""
        start = _query_int(request, "start", 0) or 0
        limit = _query_int(request, "limit", None)
        found = await self._target(request, thread_only=True)
        found_messages = await toren_client.messages(await self._client(), found.id, start, limit)
        return _out(m.MessageList(messages=found_messages))

    async def pending(self, request: Request, thread_only: bool = False) -> Response:
        """`GET /v1/runs/{id}/pending` (and for a thread)."""
        found = await self._target(request, thread_only=thread_only)
        calls = await toren_client.pending(await self._client(), found.id)
        return _out(m.PendingList(pending=calls))

    async def decide(self, request: Request, thread_only: bool = False) -> Response:
        """`POST /v1/runs/{id}/decisions`: through the run's `decide` update."""
        req = await body(request, m.Decide)
        found = await self._target(request, thread_only=thread_only)
        if found.status not in (None, WorkflowExecutionStatus.RUNNING):
            raise WebError(409, f"{found.id!r} has closed: no call waits any more", field="id")
        client = await self._client()
        by = await decider(client, request.state.access, found.id, req)
        async with _closing_under(client, found.id, "no call waits any more"):
            decision = await toren_client.decide(
                client,
                found.id,
                req.call_id,
                req.approve,
                by=by,
                comment=req.comment,
                args=req.args,
            )
        return _out(m.DecisionOut(decision))

    async def inbox(self, request: Request) -> Response:
        """`GET /v1/inbox?agent=`: every waiting call this token may see."""
        access: Access = request.state.access
        agent = request.query_params.get("agent")
        if agent is not None:
            if not re.fullmatch(m.AGENT, agent) or len(agent) > 100:
                raise WebError(400, f"agent {agent[:100]!r} is not an agent name", field="agent")
            self._allow_agent(request, agent)
        client = await self._client()
        if agent is None and access.agents is not None:
            # Only the token's agents: ask visibility for those, not for the whole namespace.
            items = [i for a in sorted(access.agents) for i in await toren_client.inbox(client, a)]
            items.sort(key=lambda i: i.call.requested_at)
        else:
            items = await toren_client.inbox(client, agent=agent)
        entries = [
            m.InboxEntry(
                run_id=i.run_id,
                agent=i.agent,
                age_s=i.age.total_seconds(),
                call=i.call,
            )
            for i in items
            if access.allows(i.agent)
        ]
        questions = [
            m.QuestionEntry(
                run_id=i.run_id, agent=i.agent, age_s=i.age.total_seconds(), question=i.question
            )
            for i in await toren_client.question_inbox(client, agent=agent)
            if access.allows(i.agent)
        ]
        return _out(m.InboxList(inbox=entries, questions=questions))

    async def events(self, request: Request, thread_only: bool = False) -> Response:
        """`GET /v1/runs/{id}/events`: the event log, derived from the history."""
        found = await self._target(request, thread_only=thread_only)
        log: list[dict[str, Any]] = await toren_client.events(await self._client(), found.id)
        return _out(m.EventList(events=log))

    async def stream(self, request: Request, thread_only: bool = False) -> Response:
        """`GET /v1/runs/{id}/stream`: Server-Sent Events from `Last-Event-ID` or `?from=`."""
        offset = start_offset(
            request.query_params.get("from"), request.headers.get("last-event-id")
        )
        found = await self._target(request, thread_only=thread_only)
        client = await self._client()
        await check_stream(client, found.id)
        return StreamingResponse(
            sse_events(client, found.id, offset, thread=found.workflow_type == "AgentThread"),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- questions for a person (`ask_human`, `ctx.ask`) ----------------------------------------

    async def answer(self, request: Request, thread_only: bool = False) -> Response:
        """`POST /v1/runs/{id}/answers`: through the run's `answer` update."""
        req = await body(request, m.AnswerQuestion)
        found = await self._target(request, thread_only=thread_only)
        if found.status not in (None, WorkflowExecutionStatus.RUNNING):
            raise WebError(409, f"{found.id!r} has closed: no question waits any more", field="id")
        client = await self._client()
        async with _closing_under(client, found.id, "no question waits any more"):
            recorded = await toren_client.answer(
                client,
                found.id,
                req.question_id,
                req.text,
                by=speaker(request.state.access, req.by),
            )
        return _out(m.AnswerOut(recorded))

    async def _questions(
        self, run_id: str, status: WorkflowExecutionStatus
    ) -> list[PendingQuestion]:
        """A running run's waiting questions; none from a run no worker answers for now."""
        if status != WorkflowExecutionStatus.RUNNING:
            return []
        try:
            return await toren_client.pending_questions(await self._client(), run_id, timeout=5)
        except UndecodablePayloadError:
            raise
        except Exception:  # no worker polls, or one of a release that asks no questions
            return []


@contextlib.asynccontextmanager
async def _closing_under(client: Client, run_id: str, what: str) -> AsyncIterator[None]:
    """A run seen running that closes before its update lands: 409 as for a closed run.

    Temporal answers an update to a run that is closing or has just closed with NOT_FOUND
    ("workflow execution already completed", "workflow update was aborted by closing
    workflow"), which is no unknown run: the run is asked how it stands.
    """
    try:
        yield
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        try:
            status = (await client.get_workflow_handle(run_id).describe()).status
        except RPCError:
            raise err from None
        if status in (None, WorkflowExecutionStatus.RUNNING):
            raise
        raise WebError(409, f"{run_id!r} has closed: {what}", field="id") from None
