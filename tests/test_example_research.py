"""examples/research: a research agent asks two specialist agents in one turn; the data
specialist's gated query is approved through the research run, and the answer has both replies.
The web specialist searches (against the example's fake search server) and has each source
summarised by a child agent; every child's usage counts into the research run's budget."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import ROOT, fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

EXAMPLE = ROOT / "examples" / "research"
FOLDERS = [
    EXAMPLE,
    EXAMPLE / "specialists" / "web",
    EXAMPLE / "specialists" / "data",
    EXAMPLE / "specialists" / "summariser",
]


def fake_search_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fake_search", EXAMPLE / "fake_search.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_search(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example's fake search server, with the worker's env pointing web_search at it."""
    module = fake_search_module()
    server = module.start()
    monkeypatch.setenv("TAVILY_API_KEY", "fake")
    monkeypatch.setenv("TAVILY_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    yield module
    server.shutdown()
    server.server_close()


async def test_research_asks_both_specialists_and_an_approval_reaches_it(
    client: Client, fake_search: ModuleType
) -> None:
    async with serve(client, FOLDERS):
        handle = await toren_client.start_run(client, "research", "How are we doing in the EU?")
        waiting = await toren_client.wait_for_approval(client, handle.id, timeout=60)
        data_run = f"{handle.id}/ask_data/ask_data_1"
        assert [(c.tool, c.run_id, c.path) for c in waiting] == [
            ("query_sales", data_run, ["research", "research_data", "query_sales"])
        ]
        assert waiting[0].args == {"region": "EU", "year": 2024}
        # Decided through the research run: the client finds the call in its child.
        decision = await toren_client.decide(client, handle.id, waiting[0].call_id, True, by="qa")
        assert decision.approved
        result = await result_of(handle)
    assert result.text == (
        "Here is what the specialists found:\n"
        "Web: about 5.1 million e-bikes were sold in the EU in 2024 (industry association report).\n"
        "Data: we sold 41250 e-bikes in EU in 2024."
    )
    assert not task_failures(await fetch_history(client, handle.id))
    assert fake_search.QUERIES == ["EU e-bike sales 2024"]
    web_run = f"{handle.id}/ask_web/ask_web_1"
    summaries = [f"{web_run}/summarise/summarise_{n}" for n in (1, 2)]
    results = {}
    for run in [handle.id, web_run, data_run, *summaries]:
        history = await fetch_history(client, run)
        assert not task_failures(history)
        results[run] = (
            own_tokens(history),
            (await result_of(client.get_workflow_handle(run)))["usage"],
        )
    # A run's usage is its own model calls plus every run below it: that total is what the
    # research run's `limits.maxTokens` is held against.
    for parent, children in [(web_run, summaries), (handle.id, [web_run, data_run])]:
        own, total = results[parent]
        assert own["input_tokens"] > 0
        for key in ("input_tokens", "output_tokens"):
            assert total[key] == own[key] + sum(results[c][1][key] for c in children), key


def own_tokens(history: Any) -> dict[str, int]:
    """Tokens of a run's own model calls, from its `LlmCallCompleted` events."""
    tokens = {"input_tokens": 0, "output_tokens": 0}
    for event in render(history):
        if event["type"] == "LlmCallCompleted":
            for key in tokens:
                tokens[key] += event["usage"].get(key, 0)
    return tokens
