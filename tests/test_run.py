"""AgentRun end to end on a real dev server: the loop, the tool contract, budgets, events."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from tests.conftest import (
    RESULT_TIMEOUT_S,
    ROOT,
    fetch_history,
    result_of,
    secret,
    task_failures,
    wait_for,
)
from toren import AgentRun, RunResult
from toren import client as toren_client
from toren.connect._plugin import workflow_runner
from toren.worker import serve

ECHO = """
from toren import define_tool
tool = define_tool(
    description="Echo the text back.",
    input={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    effects="none",
    idempotency="none",
    handler=lambda args, ctx: "echo:" + args["text"],
)
"""

SLOW = """
import asyncio
from toren import define_tool

async def slow(args, ctx):
    await asyncio.sleep(args["seconds"])
    return "slept"

tool = define_tool(
    description="Sleep.",
    input={"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]},
    timeout_ms=300,
    handler=slow,
)
"""

BOOM = """
from toren import define_tool

def boom(args, ctx):
    raise RuntimeError("disk on fire with token " + ctx.env["BOOM_TOKEN"])

tool = define_tool(description="Fails.", handler=boom)
"""

RECORD = """
import json, os, time
from pathlib import Path
from toren import define_tool

def record(args, ctx):
    with open(ctx.env["RECORD_FILE"], "a") as f:
        f.write(json.dumps({"key": ctx.idempotency_key, "attempt": ctx.attempt,
                            "start": time.time(), "name": args.get("name", "")}) + "\\n")
    time.sleep(args.get("sleep", 0))
    return "recorded " + args.get("name", "")

tool = define_tool(
    description="Record the call.",
    input={"type": "object", "properties": {"name": {"type": "string"}, "sleep": {"type": "number"}}},
    effects="external",
    idempotency="keyed",
    handler=record,
)
"""

GATED = """
from toren import define_tool
tool = define_tool(
    description="Pay someone.",
    input={"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]},
    effects="external",
    approval="always",
    handler=lambda args, ctx: f"paid {args['amount']}",
)
"""


def call(tool: str, id: str | None = None, **args: Any) -> dict[str, Any]:
    return {"name": tool, "args": args, **({"id": id} if id else {})}


async def run(client: Client, folder: Path, prompt: str = "go", **kwargs: Any) -> RunResult:
    agent = folder.name
    return await result_of(toren_client.run_agent(client, agent, prompt, **kwargs))


def tool_results(history: Any) -> list[str]:
    """Every tool result the model saw, from the model calls' inputs and tool activities."""
    from toren.client._events import render

    return [e["result"] for e in render(history) if e["type"] == "ToolCallCompleted"]


async def test_plain_run_and_result(client: Client, make_agent: Callable[..., Path]) -> None:
    folder = make_agent(
        tools={"echo": ECHO},
        script=[
            {"text": "calling", "tool_calls": [call("echo", text="hi")]},
            "final: {last_tool_result}",
        ],
    )
    async with serve(client, [folder]):
        result = await run(client, folder)
    assert result.text == "final: echo:hi"
    assert result.steps == 2
    assert result.tool_calls == 1
    assert result.usage["input_tokens"] > 0


async def test_startable_by_name_with_plain_json(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    folder = make_agent(script=["plain json works"])
    name = folder.name
    async with serve(client, [folder]):
        # The default data converter, a dict, a workflow type by name: what any SDK sends.
        plain = await Client.connect(dev_server.address)
        result = await result_of(
            plain.execute_workflow(
                "AgentRun", {"agent": name, "prompt": "hi"}, id=f"{name}-plain", task_queue=name
            )
        )
        assert result["text"] == "plain json works"
        cli = ROOT / ".venv" / "bin" / "temporal"
        out = await asyncio.to_thread(
            subprocess.run,
            [str(cli) if cli.exists() else "temporal", "workflow", "execute", "--address",
             dev_server.address, "--type", "AgentRun", "--task-queue", name,
             "--workflow-id", f"{name}-cli", "--input", json.dumps({"agent": name, "prompt": "hi"}),
             "-o", "json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "plain json works" in out.stdout


async def test_bad_calls_become_error_results(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"echo": ECHO},
        script=[
            {
                "tool_calls": [
                    call("nope", id="c1"),
                    {"id": "c2", "name": "echo", "arguments": "{not json"},
                    call("echo", id="c3", text=5),
                    {"id": "c4", "name": "echo", "arguments": "[1, 2]"},
                    call("echo", id="c5", text="fine"),
                ]
            },
            "recovered",
        ],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "recovered"
    history = await fetch_history(client, handle.id)
    results = tool_results(history)
    assert "unknown tool: nope" in results
    assert any(r.startswith("invalid arguments for echo: not valid JSON") for r in results)
    assert "invalid arguments for echo: text: 5 is not of type 'string'" in results
    assert "invalid arguments for echo: expected a JSON object, got list" in results
    assert "echo:fine" in results
    # Only the valid call became an activity.
    scheduled = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    names = [e.activity_task_scheduled_event_attributes.activity_type.name for e in scheduled]
    assert names.count(f"{folder.name}.echo") == 1
    assert not task_failures(history)


async def test_calls_of_one_turn_run_concurrently(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    record_file = tmp_path / "calls.jsonl"
    folder = make_agent(
        tools={"record": RECORD},
        script=[{"tool_calls": [call("record", name=n, sleep=1.0) for n in "abc"]}, "done"],
        env={"required": ["RECORD_FILE"]},
    )
    async with serve(client, [folder], environ={"RECORD_FILE": str(record_file)}):
        await run(client, folder)
    starts = sorted(json.loads(line)["start"] for line in record_file.read_text().splitlines())
    assert len(starts) == 3
    # Each call sleeps 1 s before it returns: one after another, each would start only after
    # the previous one ended. Concurrently, all three start before the first one ends.
    assert starts[-1] < starts[0] + 1.0


async def test_timeout_ms_returns_an_error_result_and_the_run_goes_on(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"slow": SLOW},
        script=[{"tool_calls": [call("slow", seconds=5)]}, "after: {last_tool_result}"],
    )
    async with serve(client, [folder]):
        result = await run(client, folder)
    assert result.text == "after: tool slow timed out after 300ms"


async def test_handler_exception_is_an_error_result_not_retried_and_redacted(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    token = secret("boom-secret-8f2a1c")
    folder = make_agent(
        tools={"boom": BOOM},
        script=[{"tool_calls": [call("boom")]}, "saw: {last_tool_result}"],
        env={"required": ["BOOM_TOKEN"]},
    )
    async with serve(client, [folder], environ={"BOOM_TOKEN": token}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "saw: tool boom failed: RuntimeError: disk on fire with token [redacted]"
    history = await fetch_history(client, handle.id)
    started = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert all(e.activity_task_started_event_attributes.attempt == 1 for e in started)
    assert token.encode() not in history.to_json().encode()


async def test_idempotency_keys_are_per_call(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    record_file = tmp_path / "calls.jsonl"
    folder = make_agent(
        tools={"record": RECORD},
        script=[
            {"tool_calls": [call("record", id="a", name="1"), call("record", id="b", name="2")]},
            {"tool_calls": [call("record", id="a", name="3")]},
            "done",
        ],
        env={"required": ["RECORD_FILE"]},
    )
    async with serve(client, [folder], environ={"RECORD_FILE": str(record_file)}):
        handle = await toren_client.start_run(
            client, folder.name, "go", run_id=f"{folder.name}-keys"
        )
        await result_of(handle)
    keys = {
        json.loads(line)["name"]: json.loads(line)["key"]
        for line in record_file.read_text().splitlines()
    }
    assert keys == {
        "1": f"{handle.id}:1:a",
        "2": f"{handle.id}:1:b",
        "3": f"{handle.id}:2:a",
    }


RETRIED = """
import json
from temporalio.exceptions import ApplicationError
from toren import define_tool

def retried(args, ctx):
    with open(ctx.env["RECORD_FILE"], "a") as f:
        f.write(json.dumps({"key": ctx.idempotency_key, "attempt": ctx.attempt}) + "\\n")
    if ctx.attempt < args["succeed_on"]:
        raise ApplicationError("upstream 503, try again")  # retryable: Temporal retries
    return f"done on attempt {ctx.attempt}"

tool = define_tool(
    description="Fails until an attempt, recording each.",
    input={"type": "object", "properties": {"succeed_on": {"type": "integer"}}},
    effects="external",
    idempotency="keyed",
    max_attempts=2,
    handler=retried,
)
"""


def attempts_of(record_file: Path) -> list[tuple[str, int]]:
    return [
        (json.loads(line)["key"], json.loads(line)["attempt"])
        for line in record_file.read_text().splitlines()
    ]


async def test_the_idempotency_key_is_the_same_on_a_real_retry(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, run_id: str
) -> None:
    record_file = tmp_path / "calls.jsonl"
    folder = make_agent(
        tools={"retried": RETRIED},
        script=[{"tool_calls": [call("retried", id="a", succeed_on=2)]}, "{last_tool_result}"],
        env={"required": ["RECORD_FILE"]},
    )
    async with serve(client, [folder], environ={"RECORD_FILE": str(record_file)}):
        result = await run(client, folder, run_id=run_id)
    assert result.text == "done on attempt 2"
    assert attempts_of(record_file) == [(f"{run_id}:1:a", 1), (f"{run_id}:1:a", 2)]


async def test_max_attempts_runs_exactly_that_many_attempts_then_fails_closed(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, run_id: str
) -> None:
    record_file = tmp_path / "calls.jsonl"
    folder = make_agent(
        tools={"retried": RETRIED},
        script=[{"tool_calls": [call("retried", id="a", succeed_on=99)]}, "{last_tool_result}"],
        env={"required": ["RECORD_FILE"]},
    )
    async with serve(client, [folder], environ={"RECORD_FILE": str(record_file)}):
        result = await run(client, folder, run_id=run_id)
    assert result.text == "tool retried failed closed after 2 attempts"
    # Counted where the handler ran, not built from the limit: attempts 1 and 2, no third.
    assert [attempt for _, attempt in attempts_of(record_file)] == [1, 2]
    history = await fetch_history(client, run_id)
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert 2 in started and max(started) == 2


async def test_max_steps_budget_fails_the_run_clearly(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"echo": ECHO},
        script=[{"tool_calls": [call("echo", text=str(i))]} for i in range(10)],
        limits={"maxStepsPerTask": 3},
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        with pytest.raises(WorkflowFailureError) as err:
            await asyncio.wait_for(handle.result(), RESULT_TIMEOUT_S)
    cause = err.value.cause
    assert "run exceeded maxStepsPerTask=3 without a final answer" in str(cause)
    assert getattr(cause, "type", None) == "BudgetExceeded"
    assert getattr(cause, "non_retryable", None) is True
    # Where it stopped: three model calls and their three tool calls, not one more or less.
    from toren.client._events import render

    events = render(await fetch_history(client, handle.id))
    assert [e["type"] for e in events].count("LlmCallStarted") == 3
    assert tool_results(await fetch_history(client, handle.id)) == ["echo:0", "echo:1", "echo:2"]


async def test_wall_clock_budget_ends_the_run_and_cancels_calls(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    slow = SLOW.replace("timeout_ms=300", "timeout_ms=60_000")
    folder = make_agent(
        tools={"slow": slow},
        script=[{"tool_calls": [call("slow", seconds=60)]}, "never"],
        limits={"maxWallClockMin": 0.05},
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        with pytest.raises(WorkflowFailureError) as err:
            await result_of(handle)
    assert "run exceeded maxWallClockMin=0.05" in str(err.value.cause)
    history = await fetch_history(client, handle.id)
    types = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in types


async def test_max_attempts_per_task_is_the_default_retry_policy(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    own = ECHO.replace('idempotency="none",', 'idempotency="none", max_attempts=5,')
    folder = make_agent(
        tools={"echo": ECHO, "own": own},
        script=[{"tool_calls": [call("echo", text="x"), call("own", text="y")]}, "done"],
        limits={"maxAttemptsPerTask": 2},
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await result_of(handle)
    history = await fetch_history(client, handle.id)
    policies = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.retry_policy.maximum_attempts
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert policies[f"{folder.name}.echo"] == 2
    assert policies[f"{folder.name}.own"] == 5


async def test_events_render_the_run(client: Client, make_agent: Callable[..., Path]) -> None:
    folder = make_agent(
        tools={"echo": ECHO},
        script=[{"tool_calls": [call("echo", text="hi")]}, "bye"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await result_of(handle)
    events = await toren_client.events(client, handle.id)
    assert [e["type"] for e in events] == [
        "RunStarted",
        "AgentLoaded",
        "LlmCallStarted",
        "LlmCallCompleted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "LlmCallStarted",
        "LlmCallCompleted",
        "Receipt",
        "RunCompleted",
    ]
    assert (events[-2]["calls"], events[-2]["retries"]) == (2, 0)
    loaded = events[1]  # an unversioned worker: no version
    assert loaded["agent"] == folder.name and "version" not in loaded
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", loaded["digest"])
    started = events[4]
    assert started["tool"] == "echo"
    assert started["args"] == {"text": "hi"}
    assert started["idempotencyKey"].startswith(handle.id)
    assert started["effects"] == "none"
    assert events[5]["result"] == "echo:hi" and events[5]["isError"] is False
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "events", handle.id],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "ToolCallCompleted  callId=call_1_1 tool=echo result=echo:hi isError=false" in out.stdout


async def test_history_replays_against_current_code(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"echo": ECHO, "gated": GATED},
        script=[{"tool_calls": [call("echo", text="hi"), call("gated", id="g", amount=3)]}, "bye"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await wait_for(lambda: toren_client.pending(client, handle.id))
        await handle.signal("approve", {"call_id": "g", "by": "test"})
        await result_of(handle)
    history = await fetch_history(client, handle.id)
    replayer = Replayer(workflows=[AgentRun], workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)


async def test_worker_without_the_agent_fails_the_run_with_a_clear_error(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(script=["hi"])
    async with serve(client, [folder]):
        handle = await client.start_workflow(
            "AgentRun", {"agent": "someone_else", "prompt": "x"}, id=f"{folder.name}-other",
            task_queue=folder.name,
        )  # fmt: skip
        with pytest.raises(WorkflowFailureError) as err:
            await result_of(handle)
    assert "this worker does not serve agent 'someone_else'" in str(err.value.cause)
    assert getattr(err.value.cause, "type", None) == "UnknownAgent"


async def test_short_pure_lookups_run_as_local_activities(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    lookup = ECHO.replace('idempotency="none",', 'idempotency="none", timeout_ms=2_000,')
    folder = make_agent(
        tools={"lookup": lookup, "echo": ECHO},
        script=[
            {"tool_calls": [call("lookup", id="l1", text="a"), call("echo", id="e1", text="b")]},
            "done {last_tool_result}",
        ],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "done echo:b"
    history = await fetch_history(client, handle.id)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert f"{folder.name}.lookup" not in scheduled  # a marker instead of three events
    assert f"{folder.name}.echo" in scheduled
    events = await toren_client.events(client, handle.id)
    started = {e["callId"]: e for e in events if e["type"] == "ToolCallStarted"}
    assert started["l1"]["args"] == {"text": "a"} and started["l1"]["local"] is True
    completed = {e["callId"]: e for e in events if e["type"] == "ToolCallCompleted"}
    assert completed["l1"]["result"] == "echo:a"


QUICK_API = """
from toren import define_tool

tool = define_tool(description="A quick call.", input={"type": "object"}, effects="external",
                   idempotency="keyed", timeout_ms=3000, handler=lambda a, c: "ok")
"""
SLOW_API = QUICK_API.replace("timeout_ms=3000", "timeout_ms=60000")


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        # Unset: 10 s. A dead worker's call is retried after the heartbeat timeout or the
        # call's own timeout, whichever comes first: a 3 s call needs no heartbeat timer.
        ({}, {"call_model": 10, "quick": 0, "slow": 10}),
        # 0: none at all, each call is retried at its own timeout (the floor's cost).
        ({"heartbeatTimeoutS": 0}, {"call_model": 0, "quick": 0, "slow": 0}),
        # 40 s: the 60 s call's own timeout comes nearly as soon.
        ({"heartbeatTimeoutS": 40}, {"call_model": 40, "quick": 0, "slow": 0}),
    ],
)
async def test_only_a_call_with_a_long_timeout_gets_the_heartbeat_timeout(
    client: Client,
    make_agent: Callable[..., Path],
    run_id: str,
    setting: dict[str, Any],
    expected: dict[str, int],
) -> None:
    calls = [{"id": "q", "name": "quick", "args": {}}, {"id": "s", "name": "slow", "args": {}}]
    folder = make_agent(
        tools={"quick": QUICK_API, "slow": SLOW_API}, script=[{"tool_calls": calls}], **setting
    )
    async with serve(client, [folder]):
        run = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await result_of(run)
    history = await fetch_history(client, run_id)
    heartbeat = {
        e.activity_task_scheduled_event_attributes.activity_type.name.split(".")[-1]: (
            e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToSeconds()
        )
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert heartbeat == expected
