"""The one HTTP layer: post JSON, classify what came back, never retry.

`web_search` calls its service through `post_json`; the model providers, which call through
their vendors' SDKs, classify failures with `retryable_status` and `retry_after` as it does.
`post_json` builds the httpx client (the caller's transport and timeout), sends one request and
either returns the decoded JSON of a 2xx reply or raises `HTTPFailure` with the error text
built and redacted here, once. Each caller maps the failure to its own outcome (a
`ModelHTTPError`, a retryable `ApplicationError`, a tool error) and adds its own hint on how to
fix it.

```python
try:
    data = await post_json("Tavily", url, body, headers, secret=key, transport=None, timeout=20)
except HTTPFailure as failure:
    failure.retryable, failure.status, failure.retry_after   # what Temporal should do
```

Nothing here retries: Temporal's retry policy owns retries, and httpx's default transport does
none either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NotRequired, TypedDict, Unpack

import httpx

from toren.errors import TorenError
from toren.worker._redact import redactor

__all__ = [
    "RETRYABLE_STATUSES",
    "HTTPFailure",
    "PostOptions",
    "error_message",
    "post_json",
    "retry_after",
    "retryable_status",
]

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""4xx statuses worth another attempt (timeout, conflict, rate limit); every 5xx is too."""

DETAIL_CHARS = 300
"""How much of a server's error detail, or of a body that is not JSON, an error quotes."""

Reason = Literal["url", "unreachable", "status", "not_json"]


class PostOptions(TypedDict):
    """The keyword options `post_json` takes."""

    secret: str
    """The API key; it is replaced by `[redacted]` in every error text (in each form
    `toren.worker._redact` knows)."""
    transport: httpx.AsyncBaseTransport | None
    """An httpx transport to use instead of the network (tests pass an `httpx.MockTransport`),
    or None."""
    timeout: float
    """Seconds httpx allows for each of connecting, writing, reading and pool waits."""
    detail: NotRequired[Callable[[Any], str | None] | None]
    """Picks the message out of an error reply's decoded JSON, or returns None to quote the
    body's text; `error_message` (the common `{"error": {"message": ...}}` shapes) by default."""


class HTTPFailure(TorenError):
    """A call through `post_json` failed; its message is redacted and ready to show.

    It never reaches a user: each caller turns it into its own error.

    Attributes:
        reason: `url` (the URL can never work), `unreachable` (connection error or timeout),
            `status` (a non-2xx answer) or `not_json` (a 2xx answer that is not JSON).
        status: The HTTP status, for `reason == "status"` only.
        retry_after: Seconds the server asked us to wait (`Retry-After`), when it said.
        retryable: Whether another attempt may succeed: `unreachable`, `not_json` and
            `retryable_status(status)` are; a bad URL and other 4xx are not.
    """

    def __init__(
        self,
        message: str,
        reason: Reason,
        *,
        secret: str,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        # Redacted here, where every failure is built: the text lands in history and logs.
        super().__init__(redactor([secret]).text(message))
        self.reason: Reason = reason
        self.status = status
        self.retry_after = retry_after
        self.retryable = reason in ("unreachable", "not_json") or (
            status is not None and retryable_status(status)
        )


def retryable_status(status: int) -> bool:
    """Whether an error status is worth another attempt: 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_STATUSES or status >= 500


async def post_json(
    label: str,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    **options: Unpack[PostOptions],
) -> Any:
    """POST `body` as JSON and return the decoded JSON of a 2xx reply, without retrying.

    Args:
        label: The service's name, as error messages start (`OpenAI`, `Tavily`).
        url: Where to post.
        body: The JSON body.
        headers: Headers to send (auth, versions, `Accept`).
        **options: `secret`, `transport`, `timeout` and `detail` (see `PostOptions`).

    Returns:
        The decoded JSON of a 2xx reply.

    Raises:
        HTTPFailure: The URL cannot work, the server could not be reached or timed out, it
            answered a non-2xx status, or a 2xx body that is not JSON.
    """
    secret = options["secret"]
    with _failures(label, url, secret, started=None):
        # A client per call: no pool outlives the activity's event loop.
        async with _client(options) as client:
            response = await client.post(url, json=body, headers=dict(headers))
    status = response.status_code
    if not response.is_success:
        raise _status_failure(label, response, secret, options.get("detail"))
    try:
        return response.json()
    except ValueError:
        snippet = response.text[:DETAIL_CHARS]
        raise HTTPFailure(
            f"{label} returned HTTP {status} with a body that is not JSON: {snippet!r}",
            "not_json",
            secret=secret,
        ) from None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait, from `Retry-After` (seconds or HTTP-date).

    OpenAI's `retry-after-ms` is preferred when present since it is more precise.
    """
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_message(data: Any) -> str | None:
    """The message in a decoded error body, or None when it has none of the usual shapes.

    OpenAI and Anthropic send `{"error": {"message": ...}}`; some servers `{"error": "..."}`
    or `{"message": ...}` (vLLM's `{"object": "error", "message": ...}`).
    """
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:DETAIL_CHARS]
    if isinstance(error, str) and error:
        return error[:DETAIL_CHARS]
    if isinstance(data.get("message"), str) and data["message"]:
        return str(data["message"])[:DETAIL_CHARS]
    return None


def _client(options: PostOptions) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=options["transport"], timeout=options["timeout"])


@contextmanager
def _failures(label: str, url: str, secret: str, started: list[bool] | None) -> Iterator[None]:
    """Turn httpx's errors into `HTTPFailure`; a non-empty `started` means mid-stream."""
    try:
        yield
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        # A bad URL never starts working; do not let Temporal retry it.
        raise HTTPFailure(f"{label}: cannot call {url!r}: {exc}", "url", secret=secret) from None
    except httpx.HTTPError as exc:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
        if started:
            kind = "timed out mid-stream" if kind == "timed out" else "broke off mid-stream"
        raise HTTPFailure(
            f"{label} {kind}: {type(exc).__name__}: {exc}", "unreachable", secret=secret
        ) from None


def _status_failure(
    label: str,
    response: httpx.Response,
    secret: str,
    detail: Callable[[Any], str | None] | None,
) -> HTTPFailure:
    status = response.status_code
    return HTTPFailure(
        f"{label} returned HTTP {status}: {_detail(response, detail or error_message)}",
        "status",
        secret=secret,
        status=status,
        retry_after=retry_after(response.headers),
    )


def _detail(response: httpx.Response, pick: Callable[[Any], str | None]) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    found = pick(data) if data is not None else None
    if found is None:
        found = response.text[:DETAIL_CHARS].strip() or response.reason_phrase or "(empty body)"
    return found
