"""The Gemini provider: `gemini/<model>` (Gemini API) and `vertex/<model>` (Vertex AI).

Built on Google's `google-genai` SDK (`pip install 'toren[gemini]'`), asynchronously
(`client.aio.models`). The wire format is `toren.worker.models._gemini_wire`'s; this module
owns the client and the failures. As every toren provider, it never retries: the SDK's retries
are off (`HttpRetryOptions(attempts=1)`, which also stops its implicit retry of connection
errors), and each failure becomes a `ModelHTTPError` that Temporal's retry policy judges: a 429
(`RESOURCE_EXHAUSTED`) waits its `Retry-After` (or the body's `RetryInfo.retryDelay`), a 5xx, a
timeout or a lost connection is retried, any other 4xx fails the run at once, and a prompt over
the window is a `PromptTooLongError`.

```python
model = GeminiModel(api_key, timeout=120)                       # the Gemini API
model = GeminiModel(vertex=Vertex("my-project", "us-central1"))  # Vertex AI, ADC credentials
reply = await model.complete(ModelRequest(model="gemini-2.5-flash", system="", messages=[...]))
```

Every call has its own httpx client (toren's transport and timeout, so tests pass an
`httpx.MockTransport`): no pool outlives the activity's event loop.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from toren.errors import ConfigError, PromptTooLongError
from toren.worker._http import DETAIL_CHARS, retry_after, retryable_status
from toren.worker._redact import redactor
from toren.worker.models._base import ModelHTTPError, ModelReply, ModelRequest
from toren.worker.models._gemini_wire import MALFORMED, ReplyParts, request_arguments
from toren.worker.models._tls import httpx_tls
from toren.worker.models._window import refusal_for

try:
    import google.auth
    import google.auth.exceptions
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types
except ImportError:  # pragma: no cover - the extra is not installed
    genai = None  # type: ignore[assignment]

__all__ = ["GeminiModel", "Vertex"]

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
"""What Vertex AI's credentials must be good for."""

_PARSE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


@dataclass(frozen=True)
class Vertex:
    """Where on Vertex AI a `vertex/` model runs, and with which credentials."""

    project: str
    """`GOOGLE_CLOUD_PROJECT`."""
    location: str = "global"
    """`GOOGLE_CLOUD_LOCATION` (`us-central1`, …); `global` by default."""
    credentials_file: str | None = None
    """`GOOGLE_APPLICATION_CREDENTIALS`: a service account's JSON key file; `None`: Application
    Default Credentials (`gcloud auth application-default login`, a VM's service account)."""
    credentials: Any = None
    """Ready credentials (a `google.auth.credentials.Credentials`), instead of finding them."""


class GeminiModel:
    """A Gemini model behind the Gemini API (an API key) or Vertex AI (`vertex`).

    Args:
        api_key: The Gemini API key; it never appears in an error or in `repr`.
        vertex: Call Vertex AI instead: its project, location and credentials.
        base_url: The API root, instead of Google's (a proxy, or a test's server).
        transport: An httpx transport to use instead of the network (tests pass a
            `httpx.MockTransport`).
        timeout: Seconds allowed for each of connecting, writing, reading and pool waits.

    Raises:
        ConfigError: `google-genai` is not installed.
    """

    def __init__(
        self,
        api_key: str = "",
        *,
        vertex: Vertex | None = None,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 120.0,
    ) -> None:
        if genai is None:
            raise ConfigError(
                "gemini/ and vertex/ models need Google's SDK: pip install 'toren[gemini]'"
            )
        self.api_key = api_key
        self.vertex = vertex
        self.base_url = base_url.rstrip("/") if base_url else None
        self.transport = transport
        self.timeout = timeout
        vendor = "Vertex AI" if vertex else "Gemini"
        self.label = f"{vendor} at {self.base_url}" if self.base_url else vendor
        self._credentials = vertex.credentials if vertex else None

    def __repr__(self) -> str:
        # Where it points, and never the key.
        return f"GeminiModel(label={self.label!r})"

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one request and read the reply (streamed when `request.on_delta` is set).

        Raises:
            ModelHTTPError: The API answered with an error, could not be reached, or sent a
                reply toren cannot read (or one that ended `MALFORMED_FUNCTION_CALL`, which is
                retryable); `retryable` says whether to try again.
            PromptTooLongError: The prompt is over the model's window.
            ValueError: The request holds a tool a provider runs.
        """
        wire, settings = request_arguments(request)
        # As the SDK's types: a transcript they cannot carry fails here, before any call.
        contents = [genai_types.Content.model_validate(turn) for turn in wire]
        config = genai_types.GenerateContentConfig.model_validate(settings)
        parts = ReplyParts(request)
        on_delta = request.on_delta
        async with self._models() as models:
            if on_delta is None:
                with self._failures():
                    response = await models.generate_content(
                        model=request.model, contents=contents, config=config
                    )
                with self._parsing():
                    parts.feed(response)
                return self._read(parts)
            with self._failures():
                stream = await models.generate_content_stream(
                    model=request.model, contents=contents, config=config
                )
            started = False  # the SDK sends the request on the first read
            while True:
                with self._failures(mid_stream=started):
                    chunk = await anext(stream, None)
                started = True
                if chunk is None:
                    break
                with self._parsing():
                    deltas = parts.feed(chunk)
                # Outside the `with`: what `on_delta` raises is the caller's own error.
                for delta in deltas:
                    on_delta(delta)
            if not parts.finished:
                # Retryable: never a half-built reply (a new attempt streams it again).
                raise ModelHTTPError(f"{self.label} ended the stream before its finishReason")
        return self._read(parts)

    def _read(self, parts: ReplyParts) -> ModelReply:
        if parts.malformed is not None:
            # Never an (empty) answer: retryable, as a new sample usually calls it right.
            said = f": {parts.malformed[:DETAIL_CHARS]}" if parts.malformed else ""
            raise self._error(
                f"{self.label} finished with {MALFORMED.upper()} (a tool call it could not "
                f"parse; a new attempt samples again){said}"
            )
        with self._parsing():
            return parts.reply()

    @asynccontextmanager
    async def _models(self) -> AsyncIterator[Any]:
        async with httpx.AsyncClient(
            transport=self.transport, timeout=self.timeout, verify=httpx_tls()
        ) as http:
            options = genai_types.HttpOptions(
                base_url=self.base_url,
                timeout=int(self.timeout * 1000),  # the SDK counts milliseconds
                # Temporal owns retries: one attempt, and no implicit retry of a lost connection.
                retry_options=genai_types.HttpRetryOptions(attempts=1),
                httpx_async_client=http,
                # The SDK would load the CA bundle twice per client (some 100 ms) otherwise.
                client_args={"verify": httpx_tls()},
                async_client_args={"verify": httpx_tls(), "ssl": httpx_tls()},
            )
            if self.vertex is None:
                client = genai.Client(vertexai=False, api_key=self.api_key, http_options=options)
            else:
                with self._failures():
                    # Found once per worker; google.auth may ask a metadata server: off the loop.
                    credentials = await asyncio.to_thread(self._vertex_credentials)
                client = genai.Client(
                    vertexai=True,
                    project=self.vertex.project,
                    location=self.vertex.location,
                    credentials=credentials,
                    http_options=options,
                )
            yield client.aio.models

    def _vertex_credentials(self) -> Any:
        # Found once per worker: the SDK refreshes the token they hold when it expires.
        assert self.vertex is not None
        if self._credentials is None:
            if self.vertex.credentials_file:
                found, _ = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
                    self.vertex.credentials_file, scopes=SCOPES
                )
            else:
                found, _ = google.auth.default(scopes=SCOPES)
            self._credentials = found
        return self._credentials

    def _error(self, text: str, **kwargs: Any) -> ModelHTTPError:
        return ModelHTTPError(redactor([self.api_key]).text(text), **kwargs)

    @contextmanager
    def _parsing(self) -> Iterator[None]:
        try:
            yield
        except _PARSE_ERRORS as exc:
            # Most often a proxy's hiccup: retryable (status None).
            raise self._error(
                f"{self.label} sent a reply that is not a GenerateContentResponse ({exc!r})"
            ) from None

    @contextmanager
    def _failures(self, *, mid_stream: bool = False) -> Iterator[None]:
        """The SDK's failures as toren's (`toren.worker._http`'s classification)."""
        try:
            yield
        except genai_errors.APIError as exc:
            raise self._status_error(exc) from None
        except (json.JSONDecodeError, genai_errors.UnknownApiResponseError) as exc:
            # A 200 that is not JSON (a proxy's page): retryable, as `post_json`'s `not_json`.
            raise self._error(
                f"{self.label} sent a reply that is not JSON: {str(exc)[:DETAIL_CHARS]}"
            ) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise self._error(f"{self.label}: cannot call it: {exc}", retryable=False) from None
        except httpx.HTTPError as exc:
            kind = (
                "timed out" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
            )
            if mid_stream:
                kind = "timed out mid-stream" if kind == "timed out" else "broke off mid-stream"
            raise self._error(f"{self.label} {kind}: {type(exc).__name__}: {exc}") from None
        except google.auth.exceptions.TransportError as exc:
            raise self._error(f"{self.label}: getting an access token failed: {exc}") from None
        except google.auth.exceptions.GoogleAuthError as exc:
            raise self._error(
                f"{self.label}: no usable credentials ({type(exc).__name__}: {exc}); set "
                "GOOGLE_APPLICATION_CREDENTIALS to a service account's key file, or run "
                "`gcloud auth application-default login` where the worker runs",
                retryable=False,
            ) from None

    def _status_error(self, exc: Any) -> ModelHTTPError:
        status = int(exc.code or 0) or None
        said = " ".join(str(x) for x in (exc.status, exc.message) if x)[:DETAIL_CHARS]
        text = redactor([self.api_key]).text(
            f"{self.label} returned HTTP {status}: {said or '(no message)'}"
        )
        refusal = refusal_for(text)
        if refusal is not None:
            return PromptTooLongError(text, status, refusal.window, refusal.prompt_tokens)
        headers = getattr(exc.response, "headers", None)
        wait = retry_after(httpx.Headers(dict(headers))) if headers else None
        if wait is None:
            wait = _retry_delay(exc.details)
        return ModelHTTPError(
            text,
            status=status,
            retry_after=wait,
            retryable=status is None or retryable_status(status),
        )


def _retry_delay(details: Any) -> float | None:
    """Seconds from a Google error body's `RetryInfo` (`"retryDelay": "20s"`), when it has one.

    Gemini's 429 says how long to wait there rather than in a `Retry-After` header.
    """
    error = details.get("error") if isinstance(details, dict) else None
    listed = error.get("details") if isinstance(error, dict) else None
    for detail in listed if isinstance(listed, list) else []:
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith("RetryInfo"):
            continue
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", str(detail.get("retryDelay", "")))
        if found:
            return float(found[1])
    return None
