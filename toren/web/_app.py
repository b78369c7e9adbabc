"""The ASGI app: routes, bearer-token check, errors as JSON."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from temporalio.client import Client

from toren.connect._codec import CodecSettings
from toren.web._auth import Token, authorize, parse_tokens
from toren.web._console import Console
from toren.web._errors import answer, error_response
from toren.web._inbox_feed import InboxWatcher, inbox_events
from toren.web._listing import Listing
from toren.web._openapi import openapi
from toren.web._routes import Handlers

__all__ = ["create_app"]

Endpoint = Callable[[Request], Awaitable[Response]]


class _Connection:
    """The Temporal client: the one given, or one connected (`toren.connect`) on first use."""

    def __init__(self, client: Client | None, codec: CodecSettings | None = None) -> None:
        self._client = client
        self._codec = codec
        self._lock: asyncio.Lock | None = None

    async def __call__(self) -> Client:
        if self._client is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._client is None:
                    from toren.connect import connect

                    self._client = await connect(codec=self._codec)
        return self._client


def _guarded(handler: Endpoint, tokens: list[Token]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        access = authorize(tokens, request.headers.get("authorization"))
        if access is None:
            return error_response(
                401,
                "a bearer token is required: Authorization: Bearer <token> (see TOREN_WEB_TOKENS)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        request.state.access = access
        try:
            return await handler(request)
        except Exception as err:
            return answer(err)  # re-raises what it cannot answer: a 500, logged by Starlette

    return endpoint


def create_app(
    client: Client | None = None,
    *,
    tokens: list[Token] | None = None,
    codec: CodecSettings | None = None,
) -> Starlette:
    """The HTTP API as an ASGI app.

    Args:
        client: the Temporal client to use; default, one connected from Temporal's env and
            config on the first request (`toren.connect.connect`).
        tokens: the accepted bearer tokens; default, those of `TOREN_WEB_TOKENS`. With none,
            every request is let in: `toren serve` allows that only on a loopback address.
        codec: the team's codec for a client connected here (`toren.connect._codec`); default from
            `TOREN_PAYLOAD_CODEC`, `TEMPORAL_CODEC_ENDPOINT` and the profile.
    """
    if tokens is None:
        tokens = parse_tokens(os.environ.get("TOREN_WEB_TOKENS"))
    connection = _Connection(client, codec)
    api = Handlers(connection)
    listing = Listing(connection)
    watcher = InboxWatcher(connection)
    document = openapi()

    async def schema(request: Request) -> Response:
        return JSONResponse(document)

    def route(path: str, handler: Endpoint, method: str) -> Route:
        return Route(path, _guarded(handler, tokens), methods=[method])

    routes = [Route("/v1/openapi.json", schema, methods=["GET"])]
    # The console (static files, no token: every API call the page makes sends one).
    console = Console()
    routes += [
        Route("/", console.index, methods=["GET"]),
        Route("/console/{path}", console.asset, methods=["GET"]),
    ]
    routes += [
        route("/v1/runs", api.start_run, "POST"),
        route("/v1/threads", api.start_thread, "POST"),
        route("/v1/threads/{id}/messages", api.send_message, "POST"),
        route("/v1/threads/{id}/messages", api.messages, "GET"),
        route("/v1/inbox", api.inbox, "GET"),
    ]
    # Under /v1/runs a thread's id works too (it runs executions); /v1/threads takes threads.
    for prefix, thread_only in (("/v1/runs", False), ("/v1/threads", True)):
        for path, handler, method in (
            ("", api.status, "GET"),
            ("/pending", api.pending, "GET"),
            ("/decisions", api.decide, "POST"),
            ("/answers", api.answer, "POST"),
            ("/events", api.events, "GET"),
            ("/stream", api.stream, "GET"),
        ):
            endpoint = functools.partial(handler, thread_only=thread_only)
            routes.append(route(f"{prefix}/{{id}}{path}", endpoint, method))

    async def inbox_stream(request: Request) -> Response:
        return StreamingResponse(
            inbox_events(watcher, request.state.access),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # The console's reads (issue 35): who the token is, its agents, the run list, the inbox live.
    routes += [
        route("/v1/me", listing.me, "GET"),
        route("/v1/agents", listing.agents, "GET"),
        route("/v1/runs", listing.runs, "GET"),
        route("/v1/inbox/stream", inbox_stream, "GET"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(exc.status_code, exc.detail)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    app.state.inbox_watcher = watcher  # one per app: every inbox stream of it shares it
    return app
