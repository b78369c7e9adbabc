"""web_search against Tavily-shaped replies on an httpx MockTransport, and the runtime's retry hook."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from toren.agent._config import AgentConfig
from toren.agent._context import ToolContext
from toren.agent._tool import Tool
from toren.agent._types import ToolCallInput
from toren.worker._agent import Agent
from toren.worker._loaded import LoadedAgent
from toren.worker.activities._tool_call import run_tool_call
from toren.worker.tools import _web_search as web_search
from toren.worker.tools._web_search import WebSearchError

KEY = "tvly-test-0123456789abcdef"

TAVILY_OK = {
    "query": "temporal durable execution",
    "follow_up_questions": None,
    "answer": "Temporal persists workflow state so code survives crashes.",
    "images": [],
    "results": [
        {
            "title": "Temporal: Durable Execution Solutions",
            "url": "https://temporal.io/",
            "content": "Build invincible apps with durable execution.",
            "score": 0.93,
            "raw_content": None,
        },
        {
            "title": "What is durable execution?",
            "url": "https://docs.temporal.io/evaluate/understanding-temporal",
            "content": "Durable execution means your code runs to completion.",
            "score": 0.87,
            "raw_content": None,
        },
    ],
    "response_time": 1.09,
}


def make_tool() -> Tool:
    return web_search.tool


TOOL = make_tool()


def ctx(**env: str) -> ToolContext:
    return ToolContext(
        env={"TAVILY_API_KEY": KEY, **env},
        idempotency_key="k",
        run_id="r",
        call_id="c",
        agent="a",
        tool="web_search",
    )


@pytest.fixture
def tavily(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[httpx.Request]]]:
    """`tavily(handler)` routes the tool's HTTP calls to `handler`; returns the requests seen."""

    def install(handler: Callable[[httpx.Request], httpx.Response]) -> list[httpx.Request]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return handler(request)

        monkeypatch.setattr(web_search, "_transport", httpx.MockTransport(record))
        return seen

    yield install


def reply(status: int, body: Any = None, text: str | None = None, **headers: str) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        if text is not None:
            return httpx.Response(status, text=text, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return handler


def test_contract() -> None:
    assert TOOL.name == "web_search"
    assert TOOL.effects == "none"
    assert TOOL.idempotency == "none"
    assert TOOL.approval == "never"
    assert TOOL.timeout_ms == 30_000
    assert TOOL.max_attempts == 3
    props = TOOL.schema["properties"]
    assert TOOL.schema["required"] == ["query"]
    assert props["max_results"]["minimum"] == 1 and props["max_results"]["maximum"] == 10
    assert props["max_results"]["default"] == 5


async def test_search(tavily: Any) -> None:
    seen = tavily(reply(200, TAVILY_OK))
    out = json.loads(await TOOL.invoke({"query": "temporal durable execution"}, ctx()))
    assert out == {
        "answer": "Temporal persists workflow state so code survives crashes.",
        "results": [
            {
                "title": "Temporal: Durable Execution Solutions",
                "url": "https://temporal.io/",
                "snippet": "Build invincible apps with durable execution.",
            },
            {
                "title": "What is durable execution?",
                "url": "https://docs.temporal.io/evaluate/understanding-temporal",
                "snippet": "Durable execution means your code runs to completion.",
            },
        ],
    }
    [request] = seen
    assert request.method == "POST"
    assert str(request.url) == "https://api.tavily.com/search"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert json.loads(request.content) == {
        "query": "temporal durable execution",
        "max_results": 5,
        "include_answer": True,
    }


async def test_base_url_and_max_results(tavily: Any) -> None:
    seen = tavily(reply(200, {"answer": None, "results": []}))
    out = json.loads(
        await TOOL.invoke(
            {"query": "x", "max_results": 10}, ctx(TAVILY_BASE_URL="http://fake:8080/")
        )
    )
    assert out == {"answer": None, "results": []}
    assert str(seen[0].url) == "http://fake:8080/search"
    assert json.loads(seen[0].content)["max_results"] == 10


async def test_long_snippets_are_cut(tavily: Any) -> None:
    body = {"results": [{"title": "t", "url": "u", "content": "y" * 10_000}]}
    tavily(reply(200, body))
    out = json.loads(await TOOL.invoke({"query": "x"}, ctx()))
    assert len(out["results"][0]["snippet"]) == web_search.SNIPPET_CHARS
    assert out["answer"] is None


@pytest.mark.parametrize(
    "args",
    [{}, {"query": ""}, {"query": "  "}, {"query": "x", "max_results": 0},
     {"query": "x", "max_results": 11}, {"query": "x", "depth": "advanced"}],
)  # fmt: skip
async def test_invalid_arguments(args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        await TOOL.invoke(args, ctx())


async def test_401_is_an_error_without_the_key(tavily: Any) -> None:
    tavily(reply(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}}))
    with pytest.raises(WebSearchError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert str(err.value) == (
        "Tavily returned HTTP 401: Unauthorized: missing or invalid API key.; "
        "check that TAVILY_API_KEY is a valid Tavily key"
    )


async def test_error_echoing_the_key_is_scrubbed(tavily: Any) -> None:
    tavily(reply(400, {"detail": {"error": f"bad request from key {KEY}"}}))
    with pytest.raises(WebSearchError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert KEY not in str(err.value)
    assert "HTTP 400: bad request from key [redacted]" in str(err.value)


async def test_429_is_retryable_with_retry_after(tavily: Any) -> None:
    tavily(reply(429, {"detail": {"error": "Rate limit exceeded"}}, **{"Retry-After": "7"}))
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert err.value.non_retryable is False
    assert err.value.type == "UpstreamRetryable"
    assert err.value.next_retry_delay == timedelta(seconds=7)
    assert err.value.message == "Tavily returned HTTP 429: Rate limit exceeded"


async def test_429_retry_after_as_a_date_and_capped(tavily: Any) -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    tavily(reply(429, {"detail": {"error": "slow down"}}, **{"Retry-After": when}))
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    delay = err.value.next_retry_delay
    assert delay is not None and timedelta(seconds=50) < delay <= timedelta(seconds=60)
    tavily(reply(429, {}, **{"Retry-After": "86400"}))
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert err.value.next_retry_delay == timedelta(seconds=web_search.MAX_RETRY_DELAY)


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_retryable(tavily: Any, status: int) -> None:
    tavily(reply(status, text="<html>upstream exploded</html>"))
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert err.value.non_retryable is False
    assert err.value.next_retry_delay is None
    assert err.value.message == f"Tavily returned HTTP {status}: <html>upstream exploded</html>"


@pytest.mark.parametrize("status", [408, 409])
async def test_408_and_409_are_retryable_as_for_the_models(tavily: Any, status: int) -> None:
    # One classification in toren.worker._http: what a model call retries, a search retries too.
    tavily(reply(status, {"detail": {"error": "try again"}}))
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert err.value.non_retryable is False
    assert err.value.message == f"Tavily returned HTTP {status}: try again"


async def test_network_failure_is_retryable(tavily: Any) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    tavily(refuse)
    with pytest.raises(ApplicationError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert err.value.non_retryable is False
    assert "Tavily could not be reached: ConnectError" in str(err.value)


async def test_bad_base_url_is_not_retried(tavily: Any) -> None:
    with pytest.raises(WebSearchError, match="check TAVILY_BASE_URL"):
        await TOOL.invoke({"query": "x"}, ctx(TAVILY_BASE_URL="ftp://nowhere"))


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (reply(200, text="<html>not json</html>"), "with a body that is not JSON"),
        (reply(200, text='{"results": [1, 2'), "with a body that is not JSON"),
        (reply(200, {"answer": "x"}), "without a 'results' list (got ['answer'])"),
        (reply(200, ["a", "b"]), "without a 'results' list (got list)"),
    ],
)
async def test_malformed_json_is_an_error(tavily: Any, handler: Any, message: str) -> None:
    tavily(handler)
    with pytest.raises(WebSearchError) as err:
        await TOOL.invoke({"query": "x"}, ctx())
    assert message in str(err.value)


async def test_missing_key_is_an_error(tavily: Any) -> None:
    seen = tavily(reply(200, TAVILY_OK))
    with pytest.raises(WebSearchError, match="'TAVILY_API_KEY' is empty"):
        await TOOL.invoke({"query": "x"}, ctx(TAVILY_API_KEY=""))
    assert seen == []


# -- through the activity: retryable errors reach Temporal, others become error results -----


def loaded_agent(tool: Tool) -> LoadedAgent:
    config = AgentConfig.model_validate(
        {"name": "a", "model": "mock/x", "builtin_tools": ["web_search"]}
    )
    agent = Agent(config=config, folder=Path("."), instructions="", tools={"web_search": tool})
    return LoadedAgent(agent=agent, env={"TAVILY_API_KEY": KEY}, provider=None, model="mock/x")  # type: ignore[arg-type]


def call_input() -> ToolCallInput:
    return ToolCallInput(
        run_key="wf/run",
        call_id="call_1",
        tool="web_search",
        args={"query": "x"},
        idempotency_key="wf:1:call_1",
        step=1,
    )


async def test_runtime_reraises_retryable_errors(tavily: Any) -> None:
    tavily(reply(429, {"detail": {"error": "Rate limit exceeded"}}, **{"Retry-After": "3"}))
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(run_tool_call, loaded_agent(TOOL), TOOL, call_input())
    assert err.value.non_retryable is False
    assert err.value.next_retry_delay == timedelta(seconds=3)


async def test_runtime_turns_other_errors_into_results(tavily: Any) -> None:
    tavily(reply(401, {"detail": {"error": f"invalid key {KEY}"}}))
    result = await ActivityEnvironment().run(run_tool_call, loaded_agent(TOOL), TOOL, call_input())
    assert result.is_error
    assert result.content.startswith(
        "tool web_search failed: WebSearchError: Tavily returned HTTP 401: invalid key"
    )
    assert KEY not in result.content
    tavily(reply(200, TAVILY_OK))
    result = await ActivityEnvironment().run(run_tool_call, loaded_agent(TOOL), TOOL, call_input())
    assert not result.is_error
    assert json.loads(result.content)["results"][0]["url"] == "https://temporal.io/"


async def test_base_url_comes_from_the_worker_environment(
    tavily: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tavily(reply(200, TAVILY_OK))
    monkeypatch.setenv("TAVILY_BASE_URL", "http://tavily-proxy.internal")
    result = await ActivityEnvironment().run(run_tool_call, loaded_agent(TOOL), TOOL, call_input())
    assert not result.is_error
    assert str(seen[0].url) == "http://tavily-proxy.internal/search"
