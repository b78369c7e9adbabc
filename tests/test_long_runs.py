"""Unlimited turns: a run continues as new at a turn boundary, carrying its transcript, state,
budgets and step count; approvals and queries keep working by workflow id."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import DevServer, result_of, task_failures, wait_for
from toren import client as toren_client
from toren.worker import serve
from toren.worker.models import ScriptedModel

COUNT = """
from toren import define_tool

async def count(args, ctx):
    n = (await ctx.get_value("n") or 0) + 1 if args.get("stateful") else None
    if n is not None:
        await ctx.set_value("n", n)
    return "x" * 200

tool = define_tool(
    description="Count.",
    input={"type": "object", "properties": {"stateful": {"type": "boolean"}}},
    effects="none",
    idempotency="none",
    handler=count,
)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""


async def run_chain(client: Client, run_id: str) -> list[str]:
    """Run ids of the workflow's chain, oldest first."""
    runs = [w async for w in client.list_workflows(f'WorkflowId = "{run_id}"')]
    return [w.run_id for w in sorted(runs, key=lambda w: w.start_time)]


async def test_two_thousand_turns_continue_as_new(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    turns = 2000
    script = [{"tool_calls": [{"name": "count", "args": {}}]} for _ in range(turns)]
    folder = make_agent(
        tools={"count": COUNT},
        script=[*script, "done after {last_tool_result}"],
        limits={"maxStepsPerTask": turns + 1, "continueAsNewAfterEvents": 3000},
    )
    started = time.monotonic()
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "count")
        result = await result_of(handle)
    elapsed = time.monotonic() - started
    assert result.steps == turns + 1
    assert result.tool_calls == turns
    chain = await run_chain(client, handle.id)
    print(f"{turns} turns in {elapsed:.1f}s over {len(chain)} runs")
    assert len(chain) >= 5
    for run_id in chain:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        assert not task_failures(history)
        assert len(history.events) < 3100


async def test_approvals_state_and_queries_cross_the_boundary(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    steps = [{"tool_calls": [{"name": "count", "args": {"stateful": True}}]} for _ in range(40)]
    folder = make_agent(
        tools={"count": COUNT, "gated": GATED},
        script=[
            *steps,
            {"tool_calls": [{"id": "g", "name": "gated", "args": {}}]},
            "end {last_tool_result}",
        ],
        limits={"continueAsNewAfterEvents": 150},
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id), timeout=60)
        assert calls[0].call_id == "g"
        first = (await run_chain(client, handle.id))[0]
        assert (await handle.describe()).run_id != first  # the run id changed, the id did not
        assert await handle.query("state") == {"n": 40}
        progress = await handle.query("progress")
        assert progress["step"] == 41
        await toren_client.approve(client, handle.id, "g", by="ops")
        result = await result_of(handle)
    assert result.text == "end gated ran"
    assert result.steps == 42
    events = await toren_client.events(client, handle.id)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunCompleted"
    assert "RunContinuedAsNew" in kinds
    assert kinds.count("ToolCallCompleted") == 41
    history = await client.get_workflow_handle(handle.id).fetch_history()
    assert history.events[0].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED


async def test_toren_replay_checks_every_run_of_a_chain(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    steps = [{"tool_calls": [{"name": "count", "args": {}}]} for _ in range(25)]
    folder = make_agent(
        tools={"count": COUNT}, script=[*steps, "done"], limits={"continueAsNewAfterEvents": 100}
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await result_of(handle)
    runs = len(await toren_client.histories(client, handle.id))
    assert runs >= 2
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "replay", handle.id],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TEMPORAL_ADDRESS": dev_server.address},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{runs} of {runs} histories replay against this code" in out.stdout


BIG = """
from toren import define_tool

def big(args, ctx):
    return str(args.get("n", 0)) + "x" * 250_000

tool = define_tool(description="A big result.", input={"type": "object", "properties": {"n": {"type": "integer"}}}, handler=big)
"""

CENSUS = """
import json
from toren import define_tool

async def census(args, ctx):
    # ctx.get_messages asks the run, which asks the runs it continued from, page by page.
    messages = await ctx.get_messages()
    return json.dumps([m["content"][:2] for m in messages if m.get("role") == "tool"])

tool = define_tool(description="Which results are there?", handler=census)
"""


async def test_a_transcript_past_two_mib_continues_as_new_by_reference(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # Twelve 250 KB results: the transcript passes the 2 MiB payload limit before the run
    # continues as new; carried whole, that continue-as-new command would fail forever.
    turns = 12
    seen: dict[str, Any] = {}

    def final(messages: list[dict[str, Any]]) -> str:
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        seen["results"] = [r[:2] for r in results[:-1]]
        seen["bytes"] = sum(len(r) for r in results)
        seen["census"] = json.loads(results[-1])
        return "read them all"

    steps = [{"tool_calls": [{"name": "big", "args": {"n": i}}]} for i in range(turns)]
    steps.append({"tool_calls": [{"name": "census", "args": {}}]})
    folder = make_agent(
        tools={"big": BIG, "census": CENSUS},
        limits={"continueAsNewAfterMB": 2.6, "maxStepsPerTask": turns + 3},
    )
    async with serve(client, [folder]) as runtime:
        runtime.agents[folder.name].provider = ScriptedModel([*steps, final])
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await asyncio.wait_for(handle.result(), timeout=120)
    assert result.text == "read them all" and result.tool_calls == turns + 1
    # The model's last step saw every result, the ones from the earlier run included, and so
    # did a tool reading the conversation through the chain of runs.
    expected = [f"{i}x" if i < 10 else str(i) for i in range(turns)]
    assert seen["results"] == expected
    assert seen["census"] == expected
    assert seen["bytes"] > 2 * 1024 * 1024
    chain = await run_chain(client, handle.id)
    assert len(chain) >= 2
    for run_id in chain:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        assert not task_failures(history)
        started = history.events[0].workflow_execution_started_event_attributes
        assert started.input.ByteSize() < 64 * 1024, "the carried state stays small"
