"""One call of the Anthropic Messages API through the official SDK, and its failures.

The SDK (`anthropic.AsyncAnthropic`) sends the request: the key, the API version, the base URL,
the timeout, its own retries off (`max_retries=0`: Temporal's retry policy owns retries). Toren
builds the body itself (`toren.worker.models._anthropic`), so the request holds exactly what
toren's transcript says, and reads the reply's JSON (or the stream's raw server-sent events, the
SDK's `AsyncStream.raw_events`) itself, so a reply's blocks are kept as they came.

Every failure becomes a `ModelHTTPError`, classified as for every provider
(`toren.worker._http`): 408, 409, 429 (with its `retry-after`) and 5xx (529 overloaded too)
are retryable, other 4xx are not; a timeout or a lost connection is retryable, a URL that can
never work is not. A refusal for length is a `PromptTooLongError`. The key never appears in an
error's text.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anthropic
import httpx2

from toren.errors import PromptTooLongError
from toren.worker._http import DETAIL_CHARS, retry_after, retryable_status
from toren.worker._redact import redactor
from toren.worker.models._anthropic_stream import AnthropicStream, StreamError
from toren.worker.models._base import ModelHTTPError, ModelReply, replayed
from toren.worker.models._window import refusal_detail, refusal_for

__all__ = ["client", "sent"]

Delta = dict[str, Any]
Parse = Callable[[Any], ModelReply]
PARSE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
"""What a parser raises on a body or an event of the wrong shape."""
STREAM_END = "`message_stop` event"

API_VERSION = "2023-06-01"
"""The Messages API version toren's request bodies and reply parsing are written for."""
API_PARAMS = ("model", "max_tokens", "messages")
"""The body's keys sent as the SDK's own arguments; the rest go as `extra_body`, as built."""


def client(
    api_key: str, base_url: str, http_client: httpx2.AsyncClient | None, timeout: float
) -> anthropic.AsyncAnthropic:
    """An SDK client that never retries; `timeout` bounds each HTTP phase.

    The key goes as `x-api-key` (not the SDK's `Authorization: Bearer`, removed from each
    request), under the API version toren's format is written for: what Anthropic documents,
    and what the compatible gateways behind `ANTHROPIC_BASE_URL` take. It is a client header,
    not a request's: the SDK logs a request's own headers at DEBUG.
    """
    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        max_retries=0,
        timeout=timeout,
        http_client=http_client,
        default_headers={"x-api-key": api_key, "anthropic-version": API_VERSION},
    )


async def sent(
    sdk: anthropic.AsyncAnthropic,
    body: dict[str, Any],
    parse: Parse,
    on_delta: Callable[[Delta], None] | None,
    *,
    label: str,
    key: str,
) -> ModelReply:
    """Send `body` and read the reply through `parse` (a message's JSON → `ModelReply`).

    With `on_delta` the reply streams: each delta goes to `on_delta` as it arrives, and the
    events, assembled into the message the non-streaming API would have sent, go through the
    same `parse`. A stream that ends before `message_stop`, or holds an event toren cannot read
    (an `error` event among them), is a retryable `ModelHTTPError`: never a half-built reply.

    Raises:
        ModelHTTPError: See the module; `PromptTooLongError` for a refusal for length.
    """
    redact = redactor([key]).text
    try:
        if on_delta is None:
            response = await posted(sdk, body)
            data = decoded(response, label, key)
            return _parsed(lambda: parse(data), label, redact)
        return await _streamed(sdk, body, parse, on_delta, label, key)
    except (anthropic.APIError, httpx2.HTTPError) as exc:
        raise failure(exc, label, key) from None
    except StreamError as exc:
        # Retryable (status None): a stream cut short or garbled is most often a hiccup. The
        # text can quote the server (an `error` event, a data line): redact the key.
        raise ModelHTTPError(redact(f"{label} {exc}")) from None


async def _streamed(
    sdk: anthropic.AsyncAnthropic,
    body: dict[str, Any],
    parse: Parse,
    on_delta: Callable[[Delta], None],
    label: str,
    key: str,
) -> ModelReply:
    reader = AnthropicStream()
    redact = redactor([key]).text
    async with streamed(sdk, body) as response:
        if "json" in response.headers.get("content-type", ""):
            # A compatible server that does not stream answers as if not asked to.
            await response.aread()
            data = decoded(response, label, key)
            return replayed(_parsed(lambda: parse(data), label, redact), on_delta)
        try:
            events = anthropic.AsyncStream.raw_events(response)
            async with aclosing(events) as stream:  # type: ignore[type-var]
                async for event in stream:
                    try:
                        deltas = reader.feed(event.event, event.data)
                    except PARSE_ERRORS as exc:
                        raise StreamError(
                            f"sent a {event.event!r} event that is not part of a streamed "
                            f"message ({exc!r})"
                        ) from None
                    # Outside the `try`: what `on_delta` raises is the caller's own error.
                    for delta in deltas:
                        on_delta(delta)
                    if reader.done:
                        break
                else:
                    raise StreamError(f"ended the stream before its end (no {STREAM_END})")
        except httpx2.HTTPError as exc:
            raise failure(exc, label, key, mid_stream=True) from None
    return _parsed(lambda: reader.reply(parse), label, redact)


def _parsed(
    build: Callable[[], ModelReply], label: str, redact: Callable[[str], str]
) -> ModelReply:
    try:
        return build()
    except PARSE_ERRORS as exc:
        # A body of the wrong shape is most often a proxy's hiccup: retryable (status None).
        # The exception can quote the body, which can quote the key: redact it.
        return_text = f"{label} sent a reply that is not a message ({exc!r})"
        raise ModelHTTPError(redact(return_text)) from None


def _arguments(body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """`messages.create`'s arguments for `body`, sent as toren built it."""
    rest = {k: v for k, v in body.items() if k not in API_PARAMS}
    extra_headers = {"Authorization": anthropic.Omit(), **(headers or {})}
    return {**{k: body[k] for k in API_PARAMS}, "extra_body": rest, "extra_headers": extra_headers}


async def posted(sdk: anthropic.AsyncAnthropic, body: dict[str, Any]) -> httpx2.Response:
    """Send `body`; the 2xx response, read whole. Raises the SDK's errors."""
    raw = await sdk.messages.with_raw_response.create(**_arguments(body))
    response: httpx2.Response = raw.http_response
    return response


@asynccontextmanager
async def streamed(
    sdk: anthropic.AsyncAnthropic, body: dict[str, Any]
) -> AsyncIterator[httpx2.Response]:
    """Send `body` asking for a stream; yields the 2xx response, its body not read yet."""
    async with sdk.messages.with_streaming_response.create(
        **_arguments(body, {"Accept": "text/event-stream"}), stream=True
    ) as raw:
        yield raw.http_response


def decoded(response: httpx2.Response, label: str, key: str) -> Any:
    """The JSON of a 2xx reply; a body that is not JSON is a retryable `ModelHTTPError`."""
    try:
        return json.loads(response.content)
    except ValueError:
        snippet = response.text[:DETAIL_CHARS]
        text = f"{label} returned HTTP {response.status_code} with a body that is not JSON: "
        raise ModelHTTPError(redactor([key]).text(f"{text}{snippet!r}")) from None


def failure(exc: Exception, label: str, key: str, *, mid_stream: bool = False) -> ModelHTTPError:
    """The SDK's (or httpx2's, mid-stream) `exc` as toren's error; see the module.

    Anything else is returned as a retryable error too: the caller raises what it gets.
    """
    redact = redactor([key]).text
    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc.response, label, redact)
    cause = exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc
    if isinstance(cause, httpx2.UnsupportedProtocol | httpx2.InvalidURL):
        # A bad URL never starts working; do not let Temporal retry it.
        return ModelHTTPError(redact(f"{label}: cannot call it: {cause}"), retryable=False)
    timed_out = isinstance(exc, anthropic.APITimeoutError) or isinstance(
        cause, httpx2.TimeoutException
    )
    kind = "timed out" if timed_out else "could not be reached"
    if mid_stream:
        kind = "timed out mid-stream" if timed_out else "broke off mid-stream"
    named = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
    return ModelHTTPError(redact(f"{label} {kind}: {named}"))


def _status_failure(
    response: httpx2.Response, label: str, redact: Callable[[str], str]
) -> ModelHTTPError:
    status = response.status_code
    try:
        data = json.loads(response.content)
    except ValueError:
        data = None
    found = refusal_detail(data) if data is not None else None
    if found is None:
        found = response.text[:DETAIL_CHARS].strip() or response.reason_phrase or "(empty body)"
    text: str = redact(f"{label} returned HTTP {status}: {found}")
    refusal = refusal_for(text)
    if refusal is not None:
        return PromptTooLongError(text, status, refusal.window, refusal.prompt_tokens)
    return ModelHTTPError(
        text,
        status=status,
        retry_after=retry_after(response.headers),
        retryable=retryable_status(status),
    )
