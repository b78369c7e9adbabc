"""The `web_search` built-in: search the live web through Tavily's HTTP API.

```yaml
# agent.yaml
builtin_tools: [web_search]   # the worker then requires TAVILY_API_KEY; an optional
                              # TAVILY_BASE_URL in its environment points at a proxy or a fake
```

The model calls `web_search {"query": "temporal durable execution", "max_results": 3}` and
gets `{"answer": "...", "results": [{"title": ..., "url": ..., "snippet": ...}]}`.

Rate limits (429) and server errors (5xx) raise a retryable `ApplicationError`, so Temporal
retries the activity (honouring `Retry-After`) up to the tool's `max_attempts`; every other
failure is an error result the model reads. The API key never appears in an error.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ApplicationError

from toren._http import retry_after
from toren._tool import Tool, ToolContext, Variable, define_tool
from toren.errors import WebSearchError

if TYPE_CHECKING:
    from toren._config import AgentConfig

__all__ = ["DEFAULT_BASE_URL", "WebSearchError", "WebSearchInput", "search", "tools"]

DEFAULT_BASE_URL = "https://api.tavily.com"
"""Tavily's API root; `TAVILY_BASE_URL` in the agent's env overrides it."""

HTTP_TIMEOUT = 20.0
"""Seconds httpx allows per phase; below the tool's 30 s so httpx's clearer error wins."""

MAX_RETRY_DELAY = 300.0
"""Upper bound on a honoured `Retry-After`, so one odd header cannot park a call for hours."""

SNIPPET_CHARS = 2_000
"""Snippets are cut to this many characters to keep the model's context small."""

_transport: httpx.AsyncBaseTransport | None = None
"""The httpx transport to use instead of the network; tests set an `httpx.MockTransport`."""


class WebSearchInput(BaseModel):
    """Arguments of `web_search`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        pattern=r"\S",
        description="What to search for, as you would type it into a search engine.",
    )
    max_results: int = Field(5, ge=1, le=10, description="How many results to return (1-10).")


async def search(args: WebSearchInput, ctx: ToolContext) -> dict[str, Any]:
    """Run one Tavily search.

    Args:
        args: The validated query and result count.
        ctx: The call's context; `TAVILY_API_KEY` (and optionally `TAVILY_BASE_URL`) come
            from `ctx.env`.

    Returns:
        `{"answer": str | None, "results": [{"title", "url", "snippet"}]}`.

    Raises:
        ApplicationError: Tavily rate-limited us (429), failed (5xx) or could not be reached;
            retryable, with `next_retry_delay` from `Retry-After` when it sent one.
        WebSearchError: Any other non-2xx status, or a 2xx body that is not a search result.
    """
    key = ctx.env.get("TAVILY_API_KEY", "")
    if not key:
        raise WebSearchError(
            "'TAVILY_API_KEY' is empty; set it in the worker's environment "
            "(get a key at https://app.tavily.com)"
        )
    base_url = (ctx.env.get("TAVILY_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    url = f"{base_url}/search"
    body = {"query": args.query, "max_results": args.max_results, "include_answer": True}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    try:
        # A client per call: no connection pool outlives the activity's event loop.
        async with httpx.AsyncClient(transport=_transport, timeout=HTTP_TIMEOUT) as client:
            response = await client.post(url, json=body, headers=headers)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        # A bad base URL never starts working, so this is not worth a retry.
        raise WebSearchError(
            _scrub(f"cannot call {url!r}: {exc}; check TAVILY_BASE_URL", key)
        ) from None
    except httpx.HTTPError as exc:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not be reached"
        raise ApplicationError(
            _scrub(f"Tavily {kind}: {type(exc).__name__}: {exc}", key),
            type="UpstreamRetryable",
            non_retryable=False,
        ) from None

    status = response.status_code
    if not response.is_success:
        message = f"Tavily returned HTTP {status}: {_scrub(_detail(response), key)}"
        if status == 429 or status >= 500:
            delay = retry_after(response.headers)
            raise ApplicationError(
                message,
                type="UpstreamRetryable",
                non_retryable=False,
                next_retry_delay=(
                    timedelta(seconds=min(delay, MAX_RETRY_DELAY)) if delay is not None else None
                ),
            )
        if status in (401, 403):
            message += "; check that TAVILY_API_KEY is a valid Tavily key"
        raise WebSearchError(message)
    return _parse(response, key)


def _parse(response: httpx.Response, key: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        snippet = _scrub(response.text[:200], key)
        raise WebSearchError(
            f"Tavily returned HTTP {response.status_code} with a body that is not JSON: {snippet!r}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        shape = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise WebSearchError(f"Tavily returned JSON without a 'results' list (got {shape})")
    results = []
    for item in data["results"]:
        if not isinstance(item, dict):
            continue
        results.append(
            {
                "title": str(item.get("title") or ""),
                "url": str(item.get("url") or ""),
                "snippet": str(item.get("content") or "")[:SNIPPET_CHARS],
            }
        )
    answer = data.get("answer")
    return {"answer": answer if isinstance(answer, str) else None, "results": results}


def _detail(response: httpx.Response) -> str:
    # Tavily errors look like {"detail": {"error": "..."}}; FastAPI-style {"detail": "..."}
    # and plain text bodies happen in front of proxies.
    try:
        data: Any = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        detail = data.get("detail")
        if isinstance(detail, dict) and detail.get("error"):
            return str(detail["error"])[:300]
        if isinstance(detail, str) and detail:
            return detail[:300]
        if data.get("error"):
            return str(data["error"])[:300]
        return json.dumps(data)[:300]
    return response.text[:300].strip() or response.reason_phrase or "(empty body)"


def _scrub(text: str, key: str) -> str:
    # Error text lands in Temporal's history and in logs; the key must never get there.
    return text.replace(key, "[redacted]") if key else text


def tools(config: AgentConfig, name: str) -> list[Tool]:
    """The `web_search` tool (the registry's entry point; `config` holds no options for it)."""
    return [
        define_tool(
            name="web_search",
            description=(
                "Search the web. Returns a short answer and the top results, each with a "
                "title, URL and snippet. Cite the URLs you use."
            ),
            input=WebSearchInput,
            effects="none",
            # A search is a read: a repeated call costs a credit, nothing more.
            idempotency="none",
            approval="never",
            timeout_ms=30_000,
            # 429/5xx retries: a few, then the call fails closed instead of spinning.
            max_attempts=3,
            # Optional and not secret: resolved into ctx.env from the worker's environment.
            variables=[Variable("TAVILY_BASE_URL", type="text", required=False)],
            handler=search,
        )
    ]
