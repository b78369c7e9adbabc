"""The `openai` SDK's errors as toren's: what `toren.worker._http` would have made of the call.

```python
except openai.APIError as exc:
    raise model_error(exc, "OpenAI", key) from None   # a ModelHTTPError, the key redacted
```

The classification is `HTTPFailure`'s: a 429 is retryable and waits its `Retry-After` (read from
the SDK error's response headers), 408/409 and every 5xx are retryable, any other 4xx is not; a
timeout or a connection error is retryable, a URL that can never work is not. A refusal for
length (`toren.worker.models._window`, read from the error body) is a `PromptTooLongError`.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from toren.errors import PromptTooLongError
from toren.worker._http import DETAIL_CHARS, HTTPFailure, retry_after
from toren.worker.models._base import ModelHTTPError
from toren.worker.models._window import refusal_detail, refusal_for

__all__ = ["PARSE_ERRORS", "model_error"]

PARSE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
"""What a parser raises on a body or an event of the wrong shape."""

_BAD_URL = ("UnsupportedProtocol", "InvalidURL")
"""httpx's (and httpx2's) errors for a URL that can never work, by name: the SDK may send
through either library."""


def model_error(
    exc: openai.APIError | httpx.HTTPError | httpx.StreamError,
    label: str,
    secret: str,
    *,
    mid_stream: bool = False,
) -> ModelHTTPError:
    """`exc` as the provider's error, its text redacted and classified as `HTTPFailure` does.

    Args:
        exc: What the SDK raised, or what httpx raised reading a streamed body (`mid_stream`).
        label: The provider as error texts start (`OpenAI`, `Azure OpenAI https://...`).
        secret: The key, replaced by `[redacted]` wherever the text holds it.
        mid_stream: The body had started: a broken connection says so.
    """
    failure = _failure(exc, label, secret, mid_stream)
    refusal = refusal_for(str(failure)) if failure.status is not None else None
    if refusal is None:
        return ModelHTTPError(
            str(failure),
            status=failure.status,
            retry_after=failure.retry_after,
            retryable=failure.retryable,
        )
    return PromptTooLongError(str(failure), failure.status, refusal.window, refusal.prompt_tokens)


def _failure(exc: BaseException, label: str, secret: str, mid_stream: bool) -> HTTPFailure:
    if isinstance(exc, openai.APIStatusError):
        response = exc.response
        return HTTPFailure(
            f"{label} returned HTTP {response.status_code}: {_detail(response)}",
            "status",
            secret=secret,
            status=response.status_code,
            retry_after=retry_after(httpx.Headers(list(response.headers.multi_items()))),
        )
    # The SDK wraps httpx's error (`__cause__`); mid-stream it is httpx's own.
    cause = exc.__cause__ if isinstance(exc, openai.APIError) and exc.__cause__ else exc
    if type(cause).__name__ in _BAD_URL:
        # A bad URL never starts working; do not let Temporal retry it.
        return HTTPFailure(f"{label}: cannot call it: {cause}", "url", secret=secret)
    timed_out = isinstance(exc, openai.APITimeoutError) or "Timeout" in type(cause).__name__
    kind = "timed out" if timed_out else "could not be reached"
    if mid_stream:
        kind = "timed out mid-stream" if timed_out else "broke off mid-stream"
    return HTTPFailure(
        f"{label} {kind}: {type(cause).__name__}: {cause}", "unreachable", secret=secret
    )


def _detail(response: Any) -> str:
    """The message of an error reply (`refusal_detail`), else the start of its text."""
    try:
        data = response.json()
    except ValueError:
        data = None
    found = refusal_detail(data) if data is not None else None
    if found is None:
        found = response.text[:DETAIL_CHARS].strip() or response.reason_phrase or "(empty body)"
    return str(found)
