"""The OpenAI provider on the official `openai` SDK: Chat Completions or Responses, OpenAI or Azure.

```python
model = OpenAIModel(key)                                    # api.openai.com
model = OpenAIModel("", base_url="http://localhost:8000/v1")  # vLLM, Ollama, llama.cpp: no key
model = AzureOpenAIModel(endpoint, api_key=key)             # azure/<deployment>
reply = await model.complete(ModelRequest(..., settings={"api": "responses"}))
```

The SDK makes the call (auth, Azure's URLs and `api-version`, the timeout); toren reads and writes
the JSON itself (`_openai_chat`, `_openai_responses`) so a compatible server's quirks, a stream
cut short and a garbled reply are told apart exactly as before. The SDK never retries
(`max_retries=0`): its errors become `ModelHTTPError`s (`_openai_errors`) and Temporal's retry
policy decides. `settings["api"]` picks the API per request: `chat` (default) or `responses`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack, aclosing
from functools import partial
from typing import Any, cast

import httpx
import openai

from toren.worker._redact import redactor
from toren.worker.models._base import ModelHTTPError, ModelReply, ModelRequest, replayed
from toren.worker.models._openai_chat import ChatStream, chat_body, parse_chat
from toren.worker.models._openai_errors import PARSE_ERRORS, model_error
from toren.worker.models._openai_responses import ResponsesStream, parse_response, responses_body
from toren.worker.models._sse import StreamError, events
from toren.worker.models._tls import httpx_tls

__all__ = ["DEFAULT_AZURE_API_VERSION", "AzureOpenAIModel", "OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_AZURE_API_VERSION = "2025-04-01-preview"
"""Azure OpenAI's `api-version` when `OPENAI_API_VERSION` is unset: one that has both APIs."""

Delta = dict[str, Any]


class OpenAIModel:
    """A model behind the OpenAI API, or any OpenAI-compatible server.

    Args:
        api_key: Sent as a bearer token; empty: no `Authorization` header (local servers need
            none). It never appears in an error or in `repr`.
        base_url: The API root with its `/v1`, `https://api.openai.com/v1` by default.
        transport: An httpx transport to use instead of the network (tests pass a
            `httpx.MockTransport`); ignored when `http_client` is given.
        timeout: Seconds allowed for each of connecting, writing, reading and pool waits.
        http_client: The httpx client the SDK sends through (the caller closes it); by default
            a new one per call, so no connection pool outlives the activity's event loop.
    """

    vendor = "OpenAI"

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.api_key = api_key
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.transport = transport
        self.timeout = timeout
        self.http_client = http_client
        self.official = self.base_url == DEFAULT_BASE_URL
        """Whether requests go to OpenAI's own API (prompt caching is on there by default)."""
        self.origin = "openai" if self.official else "openai-compatible"
        """Who encrypts the Responses API's reasoning items (they go back only there)."""
        # Errors name the server when it is not the vendor's, so a misconfigured URL shows.
        self.label = (
            self.vendor if self.official else f"{self.vendor}-compatible server {self.base_url}"
        )

    def __repr__(self) -> str:
        # Where it points, and never the key.
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def sdk_client(self, http_client: httpx.AsyncClient) -> openai.AsyncOpenAI:
        """The SDK's client for one call, sending through `http_client`."""
        return openai.AsyncOpenAI(
            # The SDK wants a key even when it sends none: a placeholder, its header omitted.
            api_key=self.api_key or "none",
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout,
            # The SDK accepts an `httpx` client as well as its own `httpx2` one.
            http_client=cast(Any, http_client),
        )

    def headers(self) -> dict[str, Any]:
        """Headers each request adds: no key, no `Authorization` (the SDK must be told so)."""
        return {} if self.api_key else {"Authorization": openai.Omit()}

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one request, through the API `request.settings["api"]` names, and parse the reply.

        Raises:
            ModelHTTPError: The server answered with an error status (`PromptTooLongError` for a
                prompt over the window), could not be reached, or sent a reply the provider
                cannot read; `retryable` says whether to try again.
            ValueError: The transcript holds something the API cannot carry.
        """
        responses = request.settings.get("api") == "responses"
        if responses:
            body = responses_body(request, self.official, self.origin)
            parse: Callable[[Any, str], ModelReply] = partial(parse_response, origin=self.origin)
        else:
            body, parse = chat_body(request, self.official), parse_chat
        async with AsyncExitStack() as stack:
            http_client = self.http_client
            if http_client is None:
                http_client = await stack.enter_async_context(
                    httpx.AsyncClient(
                        transport=self.transport, timeout=self.timeout, verify=httpx_tls()
                    )
                )
            client = self.sdk_client(http_client)
            api = client.responses if responses else client.chat.completions
            try:
                if request.on_delta is None:
                    raw = await api.with_raw_response.create(**body, extra_headers=self.headers())
                    data = _json(raw.http_response)
                    return self._parsed(lambda: parse(data, request.model), responses)
                reader = ResponsesStream() if responses else ChatStream()
                stream_fields: dict[str, Any] = {
                    "stream": True,
                    "extra_headers": {**self.headers(), "Accept": "text/event-stream"},
                }
                if not responses:
                    stream_fields["stream_options"] = {"include_usage": True}
                async with api.with_streaming_response.create(**body, **stream_fields) as raw:
                    return await self._streamed(
                        raw.http_response, reader, request, parse, request.on_delta
                    )
            except openai.APIError as exc:
                raise model_error(exc, self.label, self.api_key) from None
            except (httpx.HTTPError, httpx.StreamError) as exc:
                # Raised by reading the body, after the SDK handed it over: mid-stream.
                raise model_error(exc, self.label, self.api_key, mid_stream=True) from None
            except StreamError as exc:
                # Retryable (status None): a stream cut short or garbled is most often a hiccup.
                # The text can quote the server (an `error` event, a data line): redact the key.
                text = redactor([self.api_key]).text(f"{self.label} {exc}")
                raise ModelHTTPError(text) from None
        raise AssertionError("unreachable")  # pragma: no cover (mypy: the block returns)

    async def _streamed(
        self,
        response: Any,
        reader: ChatStream | ResponsesStream,
        request: ModelRequest,
        parse: Callable[[Any, str], ModelReply],
        on_delta: Callable[[Delta], None],
    ) -> ModelReply:
        kind = "response" if isinstance(reader, ResponsesStream) else "chat completion"
        if "json" in response.headers.get("content-type", ""):
            # A compatible server that does not stream answers as if not asked to.
            await response.aread()
            data = _json(response)
            reply = self._parsed(lambda: parse(data, request.model), kind == "response")
            return replayed(reply, on_delta)
        async with aclosing(events(response.aiter_lines())) as stream:
            async for event in stream:
                try:
                    deltas = reader.feed(event)
                except PARSE_ERRORS as exc:
                    raise StreamError(
                        f"sent a {event.event!r} event that is not part of a streamed {kind} "
                        f"({exc!r})"
                    ) from None
                # Outside the `try`: what `on_delta` raises is the caller's own error.
                for delta in deltas:
                    on_delta(delta)
                if reader.done:
                    break
            else:
                end = "response.completed" if kind == "response" else "`data: [DONE]`"
                raise StreamError(f"ended the stream before its end (no {end})")
        return self._parsed(
            lambda: reader.reply(lambda data: parse(data, request.model)), kind == "response"
        )

    def _parsed(self, build: Callable[[], ModelReply], responses: bool) -> ModelReply:
        try:
            return build()
        except PARSE_ERRORS as exc:
            # A body of the wrong shape is most often a proxy's hiccup: retryable (status None).
            # The exception can quote the body, which can quote the key: redact it.
            kind = "response" if responses else "chat completion"
            text = f"{self.label} sent a reply that is not a {kind} ({exc!r})"
            raise ModelHTTPError(redactor([self.api_key]).text(text)) from None


class AzureOpenAIModel(OpenAIModel):
    """A deployment on Azure OpenAI (`azure/<deployment>`): the SDK's `AsyncAzureOpenAI`.

    Args:
        endpoint: `https://<resource>.openai.azure.com` (`AZURE_OPENAI_ENDPOINT`).
        api_key: The resource's key (`AZURE_OPENAI_API_KEY`), sent as `api-key`; or empty, and
        ad_token: A Microsoft Entra ID token (`AZURE_OPENAI_AD_TOKEN`), sent as a bearer token.
        api_version: Azure's `api-version`; `DEFAULT_AZURE_API_VERSION` by default.
        **options: `transport`, `timeout` and `http_client`, as `OpenAIModel`'s.
    """

    vendor = "Azure OpenAI"

    def __init__(
        self,
        endpoint: str,
        api_key: str = "",
        ad_token: str = "",
        api_version: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(api_key or ad_token, base_url=endpoint, **options)
        self.key_is_token = not api_key
        self.api_version = api_version or DEFAULT_AZURE_API_VERSION
        self.official = False  # no `prompt_cache_key` unless `promptCaching: true`
        self.origin = "azure"
        self.label = f"{self.vendor} {self.base_url}"

    def sdk_client(self, http_client: httpx.AsyncClient) -> openai.AsyncOpenAI:
        """The SDK's Azure client for one call; the model name is the deployment."""
        token = self.api_key if self.key_is_token else None
        return openai.AsyncAzureOpenAI(
            azure_endpoint=self.base_url,
            api_version=self.api_version,
            # Both given (one None), so the SDK never reads them from the environment itself.
            api_key=None if self.key_is_token else self.api_key,
            azure_ad_token=token,
            max_retries=0,
            timeout=self.timeout,
            http_client=cast(Any, http_client),
        )

    def headers(self) -> dict[str, Any]:
        """Nothing more: the key or token is the SDK's to send."""
        return {}


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        snippet = response.text[:300]
        raise StreamError(
            f"returned HTTP {response.status_code} with a body that is not JSON: {snippet!r}"
        ) from None
