"""What the HTTP providers share: where they point, the key, and one call (`toren.worker._http`).

A provider subclasses `HTTPModel` and supplies only its wire format: the path, the headers, the
request body and the reply parser. The call itself, the error text and its classification are
`toren.worker._http`'s; a failure becomes a `ModelHTTPError` and Temporal's retry policy decides
what happens next (the provider never retries).

A request with `on_delta` set streams: the body gains the provider's `stream_fields`, the reply
is read as server-sent events (`toren.worker.models._sse`) by the provider's `StreamReader`, each
delta goes to `on_delta` as it arrives, and the reader's events, assembled into the body the
non-streaming API would have sent, go through the same `parse_reply`. A stream that ends before
its end, or holds an event the reader cannot read, raises a retryable `ModelHTTPError`: never a
half-built reply (Temporal retries the call; a new attempt streams the reply again).

A refusal for length (`toren.worker.models._window`) is a `PromptTooLongError`, never retried;
the window it states is remembered per model (`window`), for the next prompt to fit.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from typing import Any, ClassVar, Protocol

import httpx

from toren.errors import PromptTooLongError
from toren.worker._http import HTTPFailure, post_json, post_stream
from toren.worker._redact import redactor
from toren.worker.models._base import ModelHTTPError, ModelReply, ModelRequest
from toren.worker.models._sse import ServerSentEvent, StreamError, events
from toren.worker.models._window import refusal_detail, refusal_for

__all__ = ["HTTPModel", "StreamReader"]

Delta = dict[str, Any]
PARSE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
"""What a parser raises on a body or an event of the wrong shape."""


class StreamReader(Protocol):
    """Reads one streamed reply, event by event (a provider's `stream_reader` makes one)."""

    done: bool
    """Whether the event that ends the stream has come."""

    def feed(self, event: ServerSentEvent) -> list[Delta]:
        """Take the next event; return the deltas it carries, for `on_delta`.

        Raises:
            StreamError: An `error` event, or one the reader cannot ignore safely.
            ValueError: An event of the wrong shape (also KeyError, TypeError and friends).
        """
        ...

    def reply(self, parse: Callable[[Any], ModelReply]) -> ModelReply:
        """The whole reply, once `done`: the events assembled into a body, through `parse`."""
        ...


class HTTPModel:
    """A model behind an HTTP API; subclasses fill in the wire format.

    Args:
        api_key: The provider's key; it never appears in an error or in `repr`.
        base_url: The API root; the provider's own (`default_base_url`) by default.
        transport: An httpx transport to use instead of the network (tests pass a
            `httpx.MockTransport`).
        timeout: Seconds allowed for each of connecting, writing, reading and pool waits.
    """

    vendor: ClassVar[str]
    """The provider's name in error messages, e.g. `OpenAI`."""
    default_base_url: ClassVar[str]
    """The API root when none is given."""
    path: ClassVar[str]
    """Where requests go, below `base_url`."""
    reply_kind: ClassVar[str]
    """What a reply is called in the API's docs, for the error on one that is not."""
    stream_fields: ClassVar[dict[str, Any]]
    """What a request body gains to ask for a streamed reply."""
    stream_end: ClassVar[str]
    """The event that ends a stream, for the error on a stream cut off before it."""

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.transport = transport
        self.timeout = timeout
        # Errors name the server when it is not the vendor's, so a misconfigured URL shows.
        self.label = (
            self.vendor
            if self.base_url == self.default_base_url
            else f"{self.vendor}-compatible server {self.base_url}"
        )

    def __repr__(self) -> str:
        # Where it points, and never the key.
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one request and parse the reply.

        Args:
            request: The model call in toren's neutral format.

        Returns:
            The assistant's text, tool calls and token usage.

        Raises:
            ModelHTTPError: The server answered with an error status, could not be reached, or
                sent a reply the provider cannot read; `retryable` says whether to try again.
            ValueError: The transcript holds something the provider's format cannot carry.
        """
        if request.on_delta is not None:
            return await self._streamed(request, request.on_delta)
        try:
            data = await post_json(
                self.label,
                f"{self.base_url}{self.path}",
                self.request_body(request),
                self.headers(),
                secret=self.api_key,
                transport=self.transport,
                timeout=self.timeout,
                detail=refusal_detail,
            )
        except HTTPFailure as failure:
            raise self._failed(failure) from None
        return self._parsed(lambda: self.parse_reply(data, request.model))

    async def _streamed(
        self, request: ModelRequest, on_delta: Callable[[Delta], None]
    ) -> ModelReply:
        body = {**self.request_body(request), **self.stream_fields}
        headers = {**self.headers(), "Accept": "text/event-stream"}
        reader = self.stream_reader()
        try:
            async with post_stream(
                self.label,
                f"{self.base_url}{self.path}",
                body,
                headers,
                secret=self.api_key,
                transport=self.transport,
                timeout=self.timeout,
                detail=refusal_detail,
            ) as response:
                if "json" in response.headers.get("content-type", ""):
                    # A compatible server that does not stream answers as if not asked to.
                    data = await _json(response)
                    reply = self._parsed(lambda: self.parse_reply(data, request.model))
                    return _replayed(reply, on_delta)
                async with aclosing(events(response.aiter_lines())) as stream:
                    async for event in stream:
                        try:
                            deltas = reader.feed(event)
                        except PARSE_ERRORS as exc:
                            raise StreamError(
                                f"sent a {event.event!r} event that is not part of a streamed "
                                f"{self.reply_kind} ({exc!r})"
                            ) from None
                        # Outside the `try`: what `on_delta` raises is the caller's own error.
                        for delta in deltas:
                            on_delta(delta)
                        if reader.done:
                            break
                    else:
                        raise StreamError(f"ended the stream before its end (no {self.stream_end})")
        except HTTPFailure as failure:
            raise self._failed(failure) from None
        except StreamError as exc:
            # Retryable (status None): a stream cut short or garbled is most often a hiccup. The
            # text can quote the server (an `error` event, a data line): redact the key.
            raise ModelHTTPError(redactor([self.api_key]).text(f"{self.label} {exc}")) from None
        return self._parsed(
            lambda: reader.reply(lambda body: self.parse_reply(body, request.model))
        )

    def _failed(self, failure: HTTPFailure) -> ModelHTTPError:
        """`failure` as the provider's error: a refusal for length is a `PromptTooLongError`."""
        refusal = refusal_for(str(failure)) if failure.status is not None else None
        if refusal is None:
            return ModelHTTPError(
                str(failure),
                status=failure.status,
                retry_after=failure.retry_after,
                retryable=failure.retryable,
            )
        return PromptTooLongError(
            str(failure), failure.status, refusal.window, refusal.prompt_tokens
        )

    def _parsed(self, build: Callable[[], ModelReply]) -> ModelReply:
        try:
            return build()
        except PARSE_ERRORS as exc:
            # A body of the wrong shape is most often a proxy's hiccup: retryable (status None).
            # The exception can quote the body, which can quote the key: redact it.
            text = f"{self.label} sent a reply that is not a {self.reply_kind} ({exc!r})"
            raise ModelHTTPError(redactor([self.api_key]).text(text)) from None

    def headers(self) -> dict[str, str]:
        """The headers of every request (auth, API version)."""
        raise NotImplementedError

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request`."""
        raise NotImplementedError

    def parse_reply(self, data: Any, model: str) -> ModelReply:
        """Turn a decoded reply into a `ModelReply`; raise (KeyError, ValueError…) if it is none."""
        raise NotImplementedError

    def stream_reader(self) -> StreamReader:
        """A reader for one streamed reply."""
        raise NotImplementedError


async def _json(response: httpx.Response) -> Any:
    await response.aread()
    try:
        return response.json()
    except ValueError:
        raise StreamError(
            f"returned HTTP {response.status_code} with a body that is not JSON: "
            f"{response.text[:300]!r}"
        ) from None


def _replayed(reply: ModelReply, on_delta: Callable[[Delta], None]) -> ModelReply:
    """`reply`, its text and each tool call given to `on_delta` whole, as one delta each."""
    if reply.content:
        on_delta({"type": "text_delta", "text": reply.content})
    for index, call in enumerate(reply.tool_calls):
        on_delta(
            {"type": "tool_call_delta", "index": index, "id": call["id"], "name": call["name"],
             "arguments": call["arguments"]}
        )  # fmt: skip
    return reply
