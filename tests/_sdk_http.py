"""An `httpx.MockTransport` handed to an SDK that sends through `httpx2` (Anthropic's).

The SDK refuses `httpx` objects; the tests' fakes are written against `httpx` (the same API).
`sdk_client(transport)` is an `httpx2.AsyncClient` whose transport hands each request to the
`httpx` transport and its answer back: status, headers and the body as it streams, and a
transport error as the `httpx2` error of the same name. Still the HTTP boundary, faked.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable

import httpx
import httpx2

__all__ = ["sdk_client"]


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response, request: httpx2.Request) -> None:
        self.response = response
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            # A response answered more than once (one object a handler keeps) is read already.
            chunks = [self.response.content] if _read(self.response) else self.response.aiter_raw()
            async for chunk in _each(chunks):
                yield chunk
        except httpx.HTTPError as exc:
            raise _as_httpx2(exc, self.request) from exc


class _Bridge(httpx2.AsyncBaseTransport):
    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        asked = httpx.Request(
            request.method, str(request.url), headers=request.headers.raw, content=content
        )
        try:
            answer = await self.transport.handle_async_request(asked)
        except httpx.HTTPError as exc:
            raise _as_httpx2(exc, request) from exc
        return httpx2.Response(
            answer.status_code, headers=answer.headers.raw, stream=_Body(answer, request)
        )


def _read(response: httpx.Response) -> bool:
    try:
        response.content  # noqa: B018
    except httpx.ResponseNotRead:
        return False
    return True


async def _each(chunks: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk


def _as_httpx2(exc: httpx.HTTPError, request: httpx2.Request) -> Exception:
    kind = getattr(httpx2, type(exc).__name__, httpx2.TransportError)
    return kind(str(exc), request=request)  # type: ignore[no-any-return]


def sdk_client(transport: httpx.AsyncBaseTransport) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` answered by `transport` (an `httpx.MockTransport`)."""
    return httpx2.AsyncClient(transport=_Bridge(transport))
