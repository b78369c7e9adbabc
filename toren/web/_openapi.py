"""The OpenAPI 3.1 document of the API, built from the pydantic models in `toren.web._models`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from toren.web import _models as m
from toren.web._listing import MAX_LIMIT, STATUSES, TYPES

__all__ = ["openapi"]

_REQUESTS: tuple[type[BaseModel], ...] = (
    m.StartRun, m.StartThread, m.SendMessage, m.Decide, m.AnswerQuestion,
)  # fmt: skip
_RESPONSES: tuple[type[BaseModel], ...] = (
    m.Error, m.RunStarted, m.ThreadStarted, m.RunStatus, m.PendingList, m.InboxList,
    m.DecisionOut, m.EventList, m.MessageList, m.Answer, m.Queued, m.AnswerOut,
    m.Me, m.AgentList, m.RunList,
)  # fmt: skip
_ERRORS = {
    "400": "a malformed request (the field is named)",
    "401": "no bearer token, or an unknown one",
    "403": "the token may not touch this agent",
    "404": "no such run or thread",
    "409": "refused by the run: decided already, closed, failed, exists already",
    "413": "body too large",
    "422": "the body does not fit its schema (the field is named)",
}
_BODY_ERRORS = ("400", "401", "403", "404", "409", "413", "422")
"""What a request with a body to a run or thread may get."""
_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 1000},
}


_SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the item's offset"},
        "event": {"type": "string", "description": "always `message`"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "the item: a JSON object with `type`, `run_id`, `step`, ...",
        },
    },
}
"""One Server-Sent Event of a stream (`toren.web._sse`)."""


_INBOX_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string", "description": "always `message`"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/InboxList"},
            "description": "what waits for a person that this token may see (`InboxList`)",
        },
    },
}
"""One event of the inbox stream (`toren.web._inbox_feed`)."""


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _console_paths() -> dict[str, Any]:
    """The console's reads: who the token is, its agents, the live inbox."""
    return {
        "/v1/me": {
            "get": _op(
                "the token's name, the agents it may touch (null: all), whether the server is open",
                {"200": _json(m.Me, "ok")},
                errors=("401",),
            )
        },
        "/v1/agents": {
            "get": _op(
                "the agents this token may see: its own, or those of runs of the last 30 days",
                {"200": _json(m.AgentList, "ok")},
                errors=("401",),
            )
        },
        "/v1/inbox/stream": {
            "get": _op(
                "the inbox as Server-Sent Events: now, then on each change",
                {
                    "200": {
                        "description": "Server-Sent Events, each `data` an `InboxList`",
                        "content": {"text/event-stream": {"schema": _INBOX_EVENT}},
                    }
                },
                errors=("401",),
            )
        },
    }


def _run_list() -> dict[str, Any]:
    """`GET /v1/runs`: its filters, as `toren.web._listing` checks them."""
    return _op(
        "runs and threads from visibility, newest first, a page at a time",
        {"200": _json(m.RunList, "ok")},
        params=[
            _query("agent", "only this agent's", {"type": "string", "pattern": m.AGENT,
                                                  "maxLength": 100}),
            _query("status", "only runs in this state", {"type": "string",
                                                          "enum": list(STATUSES)}),
            _query("type", "only runs or only threads", {"type": "string", "enum": list(TYPES)}),
            _query("limit", "at most this many (default 50)",
                   {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
            _query("next", "the `next` of the page before",
                   {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,4000}={0,2}$"}),
        ],
        errors=("400", "401", "403"),
    )  # fmt: skip


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _op(
    summary: str,
    ok: dict[str, dict[str, Any]],
    *,
    request: type[BaseModel] | None = None,
    params: list[dict[str, Any]] | None = None,
    errors: tuple[str, ...] = ("400", "401", "403", "404"),
) -> dict[str, Any]:
    responses = dict(ok)
    for code in errors:
        responses[code] = _json(m.Error, _ERRORS[code])
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if params:
        op["parameters"] = params
    if request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(request)}},
        }
    return op


def _int_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "integer", "minimum": 0, "maximum": 999_999_999},
    }


def _start(what: str, request: type[BaseModel], started: type[BaseModel]) -> dict[str, Any]:
    """`POST` of a new run or thread: no 404, since nothing is looked up."""
    errors = tuple(code for code in _BODY_ERRORS if code != "404")
    return {
        "post": _op(
            f"start a {what}", {"201": _json(started, "started")}, request=request, errors=errors
        )
    }


def _workflow_paths(prefix: str, what: str) -> dict[str, Any]:
    stream = {
        "200": {
            "description": "Server-Sent Events: `id` the offset, `data` the JSON item",
            # Before OpenAPI 3.2 (`itemSchema`), an event stream's `schema` describes each event.
            "content": {"text/event-stream": {"schema": _SSE_EVENT}},
        }
    }
    last_event_id = {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "description": "resume after this offset (an `EventSource` sends it on reconnecting)",
        "schema": {"type": "string", "pattern": "^[0-9]{0,18}$"},
    }
    return {
        f"{prefix}/{{id}}": {
            "get": _op(f"the {what}'s status", {"200": _json(m.RunStatus, "ok")}, params=[_ID])
        },
        f"{prefix}/{{id}}/pending": {
            "get": _op(
                f"the {what}'s calls waiting for a decision",
                {"200": _json(m.PendingList, "ok")},
                params=[_ID],
            )
        },
        f"{prefix}/{{id}}/decisions": {
            "post": _op(
                "approve or deny a waiting call (the `decide` update)",
                {"200": _json(m.DecisionOut, "the recorded decision")},
                request=m.Decide,
                params=[_ID],
                errors=_BODY_ERRORS,
            )
        },
        f"{prefix}/{{id}}/answers": {
            "post": _op(
                "answer a question the run asks a person (the `answer` update)",
                {"200": _json(m.AnswerOut, "the recorded answer")},
                request=m.AnswerQuestion,
                params=[_ID],
                errors=_BODY_ERRORS,
            )
        },
        f"{prefix}/{{id}}/events": {
            "get": _op(f"the {what}'s event log", {"200": _json(m.EventList, "ok")}, params=[_ID])
        },
        f"{prefix}/{{id}}/stream": {
            "get": _op(
                f"the {what}'s stream as Server-Sent Events",
                stream,
                params=[_ID, _int_param("from", "first offset to send"), last_event_id],
                errors=("400", "401", "403", "404", "409"),
            )
        },
    }


def openapi() -> dict[str, Any]:
    """The OpenAPI document served at `/v1/openapi.json`."""
    _, schemas = models_json_schema(
        [(model, "validation") for model in _REQUESTS]
        + [(model, "serialization") for model in _RESPONSES],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, Any] = {
        "/v1/runs": {**_start("run", m.StartRun, m.RunStarted), "get": _run_list()},
        "/v1/threads": _start("thread", m.StartThread, m.ThreadStarted),
        "/v1/threads/{id}/messages": {
            "post": _op(
                "send a message; waits for the answer unless `wait` is false",
                {"200": _json(m.Answer, "the answer"), "202": _json(m.Queued, "queued")},
                request=m.SendMessage,
                params=[_ID],
                errors=_BODY_ERRORS,
            ),
            "get": _op(
                "the thread's messages",
                {"200": _json(m.MessageList, "ok")},
                params=[_ID, _int_param("start", "first index"), _int_param("limit", "at most")],
            ),
        },
        "/v1/inbox": {
            "get": _op(
                "every waiting call this token may see, oldest first",
                {"200": _json(m.InboxList, "ok")},
                params=[
                    {
                        "name": "agent",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "pattern": m.AGENT, "maxLength": 100},
                    }
                ],
                errors=("400", "401", "403"),
            )
        },
        **_console_paths(),
        **_workflow_paths("/v1/runs", "run"),
        **_workflow_paths("/v1/threads", "thread"),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "toren",
            "version": "1",
            "description": "Durable LLM agents on Temporal: runs, threads, approvals, events.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
