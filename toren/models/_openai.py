"""The OpenAI provider: Chat Completions over httpx, for OpenAI and any compatible server.

`base_url` points it at vLLM, Ollama, llama.cpp or another OpenAI-compatible server (it includes
the `/v1`, as `OPENAI_BASE_URL` does for OpenAI's own SDK). The provider never retries: every
failure becomes a `ModelHTTPError` and Temporal's retry policy decides what happens next.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from toren.models._base import Message, ModelHTTPError, ModelReply, ModelRequest

__all__ = ["OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIModel:
    """A model behind the OpenAI Chat Completions API.

    Args:
        api_key: Sent as a bearer token; an empty key sends no `Authorization` header (local
            servers often need none).
        base_url: The API root, `https://api.openai.com/v1` by default.
        transport: An httpx transport to use instead of the network (tests pass a
            `httpx.MockTransport`).
        timeout: Seconds allowed for each of connecting, writing, reading and pool waits.
    """

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.api_key = api_key
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.transport = transport
        self.timeout = timeout
        # Errors name the server when it is not OpenAI's, so a misconfigured local URL shows.
        self.label = (
            "OpenAI"
            if self.base_url == DEFAULT_BASE_URL
            else f"OpenAI-compatible server {self.base_url}"
        )

    def __repr__(self) -> str:
        # Where it points, and never the key.
        return f"OpenAIModel(base_url={self.base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send one Chat Completions request and parse the reply.

        Args:
            request: The model call in toren's neutral format.

        Returns:
            The assistant's text, tool calls and token usage.

        Raises:
            ModelHTTPError: The server answered with an error status, could not be reached, or
                sent a reply that is not a chat completion.
        """
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = await post_json(
            self.label,
            f"{self.base_url}/chat/completions",
            request_body(request),
            headers,
            secret=self.api_key,
            transport=self.transport,
            timeout=self.timeout,
        )
        try:
            return parse_reply(data, request.model)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise ModelHTTPError(
                f"{self.label} sent a reply that is not a chat completion ({exc!r})"
            ) from None


def request_body(request: ModelRequest) -> dict[str, Any]:
    """The Chat Completions JSON body for `request`."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message(m) for m in request.messages)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        # `max_tokens` rather than `max_completion_tokens`: compatible servers know only the
        # former, and OpenAI still accepts it for non-reasoning models.
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
                },
            }
            for tool in request.tools
        ]
    return body


def _message(message: Message) -> dict[str, Any]:
    role = message.get("role")
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        calls = message.get("tool_calls") or []
        if calls:
            # OpenAI wants null, not "", for a tool-calling turn without text.
            out["content"] = message.get("content") or None
            out["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": _text(call["arguments"])},
                }
                for call in calls
            ]
        return out
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message["tool_call_id"],
            "content": _text(message.get("content", "")),
        }
    # user, and any role the API knows that toren's format does not (e.g. "developer").
    return {"role": role, "content": message.get("content", "")}


def parse_reply(data: Any, model: str) -> ModelReply:
    """Turn a Chat Completions response body into a `ModelReply`.

    Raises:
        ValueError: The body has no `choices[0].message` (also KeyError, TypeError and friends
            for other shapes that are not a chat completion).
    """
    if not isinstance(data, dict):
        raise ValueError("the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        # Some compatible servers answer 200 with an error object instead of a status.
        raise ValueError(f"no choices; {_detail_from_json(data) or 'got ' + str(sorted(data))}")
    message = choices[0]["message"]
    if not isinstance(message, dict):
        raise ValueError("choices[0].message is not an object")
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        calls.append(
            {
                # A few compatible servers omit ids; the transcript needs one to pair results.
                "id": call.get("id") or f"call_{i + 1}",
                "name": function["name"],
                # The raw JSON text: the workflow validates it, so invalid JSON is kept as is.
                "arguments": _text(function.get("arguments") or ""),
            }
        )
    usage = data.get("usage") or {}
    return ModelReply(
        content=_content(message.get("content")),
        tool_calls=calls,
        usage={
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
        model=str(data.get("model") or model),
    )


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        # Content-part lists, which some compatible servers return for plain text.
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _text(value: Any) -> str:
    # Arguments and tool results must be strings on the wire; some servers send objects.
    return value if isinstance(value, str) else json.dumps(value)


async def post_json(
    label: str,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    secret: str,
    transport: httpx.AsyncBaseTransport | None,
    timeout: float,
) -> Any:
    """POST `body` as JSON and return the decoded JSON reply, without retrying.

    Args:
        label: The provider's name for error messages.
        url: Where to post.
        body: The JSON body.
        headers: Extra headers (auth, versions).
        secret: The API key, scrubbed from any error text.
        transport: An httpx transport, or None for the network.
        timeout: The httpx timeout in seconds.

    Returns:
        The decoded JSON of a 2xx reply.

    Raises:
        ModelHTTPError: On a non-2xx status (retryable per status), a transport error or timeout
            (retryable, status None), or a 2xx body that is not JSON (retryable, status None).
    """
    try:
        # A client per call: no pool outlives the activity's event loop, and the default httpx
        # transport does no retries, which is what we want (Temporal retries).
        async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
            response = await client.post(url, json=body, headers=headers)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        # A bad base URL never starts working; do not let Temporal retry it forever.
        raise ModelHTTPError(
            _scrub(f"{label}: cannot call {url}: {exc}", secret), retryable=False
        ) from None
    except httpx.HTTPError as exc:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
        raise ModelHTTPError(
            _scrub(f"{label} {kind}: {type(exc).__name__}: {exc}", secret)
        ) from None
    if not response.is_success:
        detail = _scrub(_detail(response), secret)
        raise ModelHTTPError(
            f"{label} returned HTTP {response.status_code}: {detail}",
            status=response.status_code,
            retry_after=retry_after(response.headers),
        )
    try:
        return response.json()
    except ValueError:
        snippet = _scrub(response.text[:300], secret)
        raise ModelHTTPError(
            f"{label} returned HTTP {response.status_code} with a body that is not JSON: "
            f"{snippet!r}"
        ) from None


def retry_after(headers: httpx.Headers) -> float | None:
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


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    detail = _detail_from_json(data) if data is not None else None
    if detail is None:
        detail = response.text[:300].strip() or response.reason_phrase or "(empty body)"
    return detail


def _detail_from_json(data: Any) -> str | None:
    # OpenAI and Anthropic: {"error": {"message": ...}}; some servers: {"error": "..."} or
    # {"message": "..."} (vLLM's {"object": "error", "message": ...}).
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(error, str) and error:
        return error[:300]
    if isinstance(data.get("message"), str) and data["message"]:
        return str(data["message"])[:300]
    return None


def _scrub(text: str, secret: str) -> str:
    # Error text ends up in Temporal's history and in logs; never let the key in.
    return text.replace(secret, "[redacted]") if secret else text
