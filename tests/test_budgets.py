"""Token and cost budgets on a real dev server: the run itself, a retried call, a child run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.errors import ConfigError
from toren.worker import serve
from toren.worker.activities import AgentRuntime
from toren.worker.models import ModelReply, ModelRequest, ScriptedModel

ECHO = """
from toren import define_tool
tool = define_tool(
    description="Echo.",
    input={"type": "object", "properties": {"text": {"type": "string"}}},
    handler=lambda a, c: "echo " + a.get("text", ""),
)
"""


def echo(id: str, size: int = 400) -> dict[str, Any]:
    return {"tool_calls": [{"id": id, "name": "echo", "args": {"text": "x" * size}}]}


class Metered:
    """A provider billed 1,000 input and 100 output tokens a call, whose first attempt of the
    second call dies after the provider answered (so its tokens are paid but not recorded)."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        answered = sum(1 for m in request.messages if m.get("role") == "assistant")
        usage = {"input_tokens": 1000, "output_tokens": 100}
        if answered == 0:
            return ModelReply(
                content="",
                tool_calls=[{"id": "e1", "name": "echo", "arguments": "{}"}],
                usage=usage,
            )
        if activity.info().attempt == 1:
            return _DiesAfterAnswer(content="lost", usage=usage)
        return ModelReply(content="done", usage=usage)


class _DiesAfterAnswer(ModelReply):
    def message(self) -> dict[str, Any]:
        raise RuntimeError("worker lost after the provider answered")


async def test_the_run_itself_crosses_its_token_budget(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"echo": ECHO}, limits={"maxTokens": 700})
    model = ScriptedModel([echo(f"e{i}") for i in range(10)])
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "go")
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    cause = failed.value.cause
    assert getattr(cause, "type", None) == "BudgetExceeded"
    assert cause.message.startswith("token budget 700 ")  # type: ignore[union-attr]
    assert "calls, 0 retries" in cause.message  # type: ignore[union-attr]
    receipt = cause.details[0]  # type: ignore[attr-defined]
    assert receipt["usage"]["input_tokens"] > 0 and receipt["cost_usd"] == 0
    events = render(await fetch_history(client, handle.id))
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["Receipt", "RunFailed"]
    billed = events[-2]["inputTokens"] + events[-2]["outputTokens"]
    assert billed == receipt["usage"]["input_tokens"] + receipt["usage"]["output_tokens"]


class Billed:
    """A provider billed 1,000 input and 100 output tokens a call: one tool call, then text."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        usage = {"input_tokens": 1000, "output_tokens": 100}
        if self.calls == 1:
            calls = [{"id": "e1", "name": "echo", "arguments": '{"text": "hi"}'}]
            return ModelReply(content="", tool_calls=calls, usage=usage)
        return ModelReply(content="done", usage=usage)


async def test_the_run_stops_before_a_call_its_budget_cannot_cover(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # 1,100 spent of 2,000 fits; the next call's prompt (about 1,100 tokens: the last call's
    # size plus the tool result) does not, so the run stops before it, not after it.
    folder = make_agent(tools={"echo": ECHO}, limits={"maxTokens": 2000})
    billed = Billed()
    async with serve(client, [folder], models={"mock/scripted": billed}):
        handle = await toren_client.start_run(client, folder.name, "go")
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    assert billed.calls == 1
    message = failed.value.cause.message  # type: ignore[union-attr]
    assert message.startswith("token budget 2000 cannot cover the next model call (about 11")
    assert message.endswith(" tokens): 1100 used, 1 call, 0 retries")
    events = render(await fetch_history(client, handle.id))
    assert [e["type"] for e in events].count("LlmCallStarted") == 1


async def test_a_retried_call_counts_the_tokens_its_lost_attempt_paid_for(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # Two calls billed 1,100 each fit in 2,500; the lost attempt's 1,100 more do not.
    folder = make_agent(
        tools={"echo": ECHO},
        limits={"maxTokens": 2500},
        modelRetry={"initialIntervalS": 0.2},
    )
    metered = Metered()
    async with serve(client, [folder], models={"mock/scripted": metered}):
        handle = await toren_client.start_run(client, folder.name, "go")
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    assert metered.calls == 3
    cause = failed.value.cause
    assert cause.message == "token budget 2500 exceeded: 3300 used, 2 calls, 1 retry"  # type: ignore[union-attr]
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    completed = [e for e in render(history) if e["type"] == "LlmCallCompleted"]
    assert completed[-1]["earlierUsage"] == {"input_tokens": 1000, "output_tokens": 100}
    assert completed[-1]["attempt"] == 2


async def test_a_failed_child_runs_usage_reaches_its_parent(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, agent_name: str
) -> None:
    child = tmp_path / f"{agent_name}_child"
    (child / "tools").mkdir(parents=True)
    (child / "agent.yaml").write_text(
        yaml.safe_dump(
            {"name": child.name, "model": "mock/scripted", "limits": {"maxStepsPerTask": 2}}
        )
    )
    (child / "instructions.md").write_text("A child that loops until its step budget ends it.")
    (child / "tools" / "echo.py").write_text(ECHO)
    (child / "mock_script.yaml").write_text(yaml.safe_dump([echo(f"c{i}", 4000) for i in range(3)]))
    parent = make_agent(
        tools={"echo": ECHO},
        builtin_tools=["run_process", "check_run"],
        processes={"work": {"agent": f"../{child.name}", "description": "Work."}},
        limits={"maxTokens": 600},
    )
    wait = """
import asyncio
from toren import define_tool

async def nap(args, ctx):
    await asyncio.sleep(3)
    return "rested"

tool = define_tool(description="Wait for the child.", handler=nap)
"""
    (parent / "tools" / "nap.py").write_text(wait)
    script = [
        {
            "tool_calls": [
                {"id": "p1", "name": "run_process", "args": {"process": "work", "input": "go"}}
            ]
        },
        {"tool_calls": [{"id": "n1", "name": "nap", "args": {}}]},
        "done",
    ]
    async with serve(client, [parent, child]) as runtime:
        runtime.agents[parent.name].provider = ScriptedModel(script)
        handle = await toren_client.start_run(client, parent.name, "go")
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
        child_failure = None
        try:
            await result_of(client.get_workflow_handle(f"{handle.id}/work/p1"))
        except WorkflowFailureError as err:
            child_failure = err.cause
    assert getattr(child_failure, "type", None) == "BudgetExceeded"  # maxStepsPerTask=2
    child_usage = child_failure.details[0]["usage"]  # type: ignore[union-attr]
    assert child_usage["input_tokens"] > 0
    cause = failed.value.cause
    assert getattr(cause, "type", None) == "BudgetExceeded"
    assert cause.message.startswith("token budget 600 ")  # type: ignore[union-attr]
    parent_usage = cause.details[0]["usage"]  # type: ignore[attr-defined]
    # The parent's own two calls are small: the child's tokens tipped it over.
    assert parent_usage["input_tokens"] >= child_usage["input_tokens"]


async def test_cost_is_recorded_per_call_and_in_the_receipt(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"echo": ECHO},
        limits={"maxCostUSD": 5, "prices": {"inputPerMTok": 2.5, "outputPerMTok": 10}},
    )
    model = ScriptedModel([echo("e1"), "done"])
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
        events = await toren_client.events(client, handle.id)
    expected = (result.usage["input_tokens"] * 2.5 + result.usage["output_tokens"] * 10) / 1e6
    assert result.cost_usd == pytest.approx(expected)
    calls = [e for e in events if e["type"] == "LlmCallCompleted"]
    assert len(calls) == 2 and sum(c["costUSD"] for c in calls) == pytest.approx(expected, abs=1e-5)
    receipt = next(e for e in events if e["type"] == "Receipt")
    assert (receipt["calls"], receipt["retries"]) == (2, 0)
    assert receipt["costUSD"] == pytest.approx(expected, abs=1e-6)
    assert events[-1]["type"] == "RunCompleted" and events[-1]["costUSD"] == result.cost_usd


def test_a_cost_budget_needs_a_price(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(limits={"maxCostUSD": 1})
    with pytest.raises(ConfigError) as failed:
        AgentRuntime.load([folder], {})
    assert "limits.maxCostUSD needs the price of model 'mock/scripted'" in str(failed.value)
    assert "limits.prices: {inputPerMTok" in str(failed.value)


def test_prices_come_from_the_table(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(model="openai/gpt-4o", limits={"maxCostUSD": 1})
    runtime = AgentRuntime.load([folder], {"OPENAI_API_KEY": "sk-test-not-used"})
    spec = runtime.agents[folder.name].spec()
    # Input, output, cache-read and cache-write (OpenAI bills no writes: the input price).
    assert spec.prices == [2.5, 10.0, 1.25, 2.5] and spec.max_cost_usd == 1
