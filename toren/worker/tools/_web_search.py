"""The `web_search` built-in: search the live web through Tavily's HTTP API.

```yaml
# agent.yaml
builtin_tools: [web_search]   # the worker then requires TAVILY_API_KEY; an optional
                              # TAVILY_BASE_URL in its environment points at a proxy or a fake
```

The model calls `web_search {"query": "temporal durable execution", "max_results": 3}` and
gets `{"answer": "...", "results": [{"title": ..., "url": ..., "snippet": ...}]}`.

The call goes through `toren.worker._http`, the layer the model providers use too. What it classes
as retryable (429, 408, 409, 5xx, a connection error or timeout) raises a retryable
`ApplicationError`, so Temporal retries the activity (honouring `Retry-After`) up to the tool's
`max_attempts`; every other failure is an error result the model reads, naming the status. The
API key never appears in an error.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ApplicationError

from toren.agent._context import ToolContext, Variable
from toren.errors import WebSearchError
from toren.worker._http import HTTPFailure, post_json
from toren.worker.tools._read_only import read_only_tool

__all__ = ["DEFAULT_BASE_URL", "WebSearchError", "WebSearchInput", "search", "tool"]

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
        ApplicationError: Tavily rate-limited us (429), timed out (408), failed (5xx) or could
            not be reached; retryable, with `next_retry_delay` from `Retry-After` when it sent
            one.
        WebSearchError: Any other non-2xx status, a bad `TAVILY_BASE_URL`, or a 2xx body that
            is not a search result.
    """
    key = ctx.env.get("TAVILY_API_KEY", "")
    if not key:
        raise WebSearchError(
            "'TAVILY_API_KEY' is empty; set it in the worker's environment "
            "(get a key at https://app.tavily.com)"
        )
    base_url = (ctx.env.get("TAVILY_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    body = {"query": args.query, "max_results": args.max_results, "include_answer": True}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    try:
        data = await post_json(
            "Tavily",
            f"{base_url}/search",
            body,
            headers,
            secret=key,
            transport=_transport,
            timeout=HTTP_TIMEOUT,
            detail=_detail,
        )
    except HTTPFailure as failure:
        raise _outcome(failure) from None
    return _parse(data)


def _outcome(failure: HTTPFailure) -> Exception:
    """What a failed call becomes: a retry by Temporal, or an error result the model reads."""
    # A 2xx that is not JSON is reported, not retried: it is most often TAVILY_BASE_URL
    # pointing at something that is not Tavily (an HTML page), which no retry fixes.
    if failure.retryable and failure.reason != "not_json":
        delay = failure.retry_after
        return ApplicationError(
            str(failure),
            type="UpstreamRetryable",
            non_retryable=False,
            next_retry_delay=(
                timedelta(seconds=min(delay, MAX_RETRY_DELAY)) if delay is not None else None
            ),
        )
    message = str(failure)
    if failure.reason == "url":
        message += "; check TAVILY_BASE_URL"
    elif failure.status in (401, 403):
        message += "; check that TAVILY_API_KEY is a valid Tavily key"
    return WebSearchError(message)


def _parse(data: Any) -> dict[str, Any]:
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


def _detail(data: Any) -> str | None:
    # Tavily errors look like {"detail": {"error": "..."}}; FastAPI-style {"detail": "..."}
    # happens in front of proxies. Any other object is quoted whole; non-objects (and plain
    # text bodies) are left to `post_json`, which quotes the body's text.
    if not isinstance(data, dict):
        return None
    detail = data.get("detail")
    if isinstance(detail, dict) and detail.get("error"):
        return str(detail["error"])[:300]
    if isinstance(detail, str) and detail:
        return detail[:300]
    if data.get("error"):
        return str(data["error"])[:300]
    return json.dumps(data)[:300]


tool = read_only_tool(
    name="web_search",
    description=(
        "Search the web. Returns a short answer and the top results, each with a "
        "title, URL and snippet. Cite the URLs you use."
    ),
    input=WebSearchInput,
    timeout_ms=30_000,
    # Optional and not secret: resolved into ctx.env from the worker's environment.
    variables=[Variable("TAVILY_BASE_URL", type="text", required=False)],
    handler=search,
)
"""The `web_search` tool: its contract is fixed, agent.yaml holds no options for it."""
