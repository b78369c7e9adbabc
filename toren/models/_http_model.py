"""What the HTTP providers share: where they point, the key, and one call through `toren._http`.

A provider subclasses `HTTPModel` and supplies only its wire format: the path, the headers, the
request body and the reply parser. The call itself, the error text and its classification are
`toren._http`'s; a failure becomes a `ModelHTTPError` and Temporal's retry policy decides what
happens next (the provider never retries).
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from toren._http import HTTPFailure, post_json
from toren.models._base import ModelHTTPError, ModelReply, ModelRequest

__all__ = ["HTTPModel"]


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
        try:
            data = await post_json(
                self.label,
                f"{self.base_url}{self.path}",
                self.request_body(request),
                self.headers(),
                secret=self.api_key,
                transport=self.transport,
                timeout=self.timeout,
            )
        except HTTPFailure as failure:
            raise ModelHTTPError(
                str(failure),
                status=failure.status,
                retry_after=failure.retry_after,
                retryable=failure.retryable,
            ) from None
        try:
            return self.parse_reply(data, request.model)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            # A body of the wrong shape is most often a proxy's hiccup: retryable (status None).
            raise ModelHTTPError(
                f"{self.label} sent a reply that is not a {self.reply_kind} ({exc!r})"
            ) from None

    def headers(self) -> dict[str, str]:
        """The headers of every request (auth, API version)."""
        raise NotImplementedError

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request`."""
        raise NotImplementedError

    def parse_reply(self, data: Any, model: str) -> ModelReply:
        """Turn a decoded reply into a `ModelReply`; raise (KeyError, ValueError…) if it is none."""
        raise NotImplementedError
