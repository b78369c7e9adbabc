"""Agents as tools (`agents:`): a call runs another agent as a child `AgentRun` and returns its
answer; children run at once within `maxParallelAgents`, share the parent's budget, are cancelled
with it, are started once whatever happens to workers, and their approvals reach the parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import DevServer, fetch_history, result_of, task_failures, wait_for
from toren import ConfigError, load_agent
from toren import client as toren_client
from toren.worker import serve

NAP = """
import asyncio
from toren import define_tool

async def nap(args, ctx):
    await asyncio.sleep(args.get("seconds", 1))
    return "rested"

tool = define_tool(description="Wait a bit.", input={"type": "object", "properties": {"seconds": {"type": "number"}}}, handler=nap)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""


def call(tool: str, prompt: str, id_: str) -> dict[str, Any]:
    return {"id": id_, "name": tool, "args": {"prompt": prompt}}


def tool_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


async def test_child_answers_as_the_tool_result_and_is_a_child_workflow(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    child = make_agent(
        name=f"{agent_name}_kid",
        description="Knows the answer.",
        script=["the answer is 42"],
    )
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        script=[
            {"tool_calls": [call("ask_kid", "what is the answer?", "k1")]},
            "kid says: {last_tool_result}",
        ],
    )
    loaded = load_agent(parent)
    assert loaded.tools["ask_kid"].description == "Knows the answer."
    async with serve(client, [parent, child]):
        handle = await toren_client.start_run(client, parent.name, "ask", run_id=f"{agent_name}-p")
        result = await result_of(handle)
    assert result.text == "kid says: the answer is 42"
    child_id = f"{handle.id}/ask_kid/k1"
    described = await client.get_workflow_handle(child_id).describe()
    assert described.parent_id == handle.id
    assert described.workflow_type == "AgentRun"
    child_result = await result_of(client.get_workflow_handle(child_id))
    # The child's tokens count into the parent's usage.
    own_calls = 2
    assert result.usage["input_tokens"] > child_result["usage"]["input_tokens"]
    assert result.steps == own_calls
    assert not task_failures(await fetch_history(client, handle.id))
    # `toren events`: the child's own log nested under the call that started it; --flat: not.
    nested = await toren_client.nested_events(client, handle.id)
    started = next(i for i, e in enumerate(nested) if e["type"] == "ProcessStarted")
    assert nested[started]["runId"] == child_id
    inner = nested[started + 1 :]
    child_log = [e for e in inner if e.get("depth") == 1]
    assert child_log[0]["type"] == "RunStarted" and child_log[0]["parentRun"] == handle.id
    assert child_log[-1]["type"] == "RunCompleted"
    assert child_log[-1]["text"] == "the answer is 42"
    assert inner[: len(child_log)] == child_log  # right after the start, before the parent goes on
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "events", handle.id],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "  │ RunCompleted" in out.stdout and 'text="the answer is 42"' in out.stdout
    flat = subprocess.run(
        [sys.executable, "-m", "toren.cli", "events", handle.id, "--flat"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host},
    )  # fmt: skip
    assert flat.returncode == 0 and "│" not in flat.stdout and "ProcessStarted" in flat.stdout


async def test_two_agent_tools_in_one_turn_run_at_once_and_answer_in_call_order(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    kids = []
    for n in ("a", "b"):
        kids.append(
            make_agent(
                name=f"{agent_name}_{n}",
                tools={"nap": NAP},
                script=[
                    {"tool_calls": [{"id": "n", "name": "nap", "args": {"seconds": 1.5}}]},
                    f"answer {n}",
                ],
            )
        )
    seen: dict[str, Any] = {}

    def final(messages: list[dict[str, Any]]) -> str:
        seen["results"] = tool_results(messages)
        return "both: " + " / ".join(tool_results(messages).values())

    parent = make_agent(
        agents={"ask_a": {"agent": f"../{kids[0].name}"}, "ask_b": {"agent": f"../{kids[1].name}"}},
        script=[{"tool_calls": [call("ask_a", "a?", "ca"), call("ask_b", "b?", "cb")]}, "x"],
    )
    async with serve(client, [parent, *kids]) as runtime:
        from toren.worker.models import ScriptedModel

        runtime.agents[parent.name].provider = ScriptedModel(
            [{"tool_calls": [call("ask_a", "a?", "ca"), call("ask_b", "b?", "cb")]}, final]
        )
        handle = await toren_client.start_run(client, parent.name, "both", run_id=f"{agent_name}-p")
        result = await result_of(handle)
    assert result.text == "both: answer a / answer b"
    assert list(seen["results"]) == ["ca", "cb"]
    spans = []
    for tool, id_ in (("ask_a", "ca"), ("ask_b", "cb")):
        d = await client.get_workflow_handle(f"{handle.id}/{tool}/{id_}").describe()
        assert d.close_time is not None
        spans.append((d.start_time, d.close_time))
    together = max(c for _, c in spans) - min(s for s, _ in spans)
    one_after_the_other = sum(((c - s) for s, c in spans), start=spans[0][0] - spans[0][0])
    # Each child naps 1.5 s; run one after the other they would take their sum.
    assert together < one_after_the_other * 0.8, (together, one_after_the_other)


async def test_a_child_out_of_its_parents_budget_is_an_error_result(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    # The child has no budget of its own: what the parent has left is its budget.
    child = make_agent(name=f"{agent_name}_kid", script=["never reached"])
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        limits={"maxTokens": 3000},
        script=[
            {"tool_calls": [call("ask_kid", "x" * 16_000, "k1")]},
            "kid: {last_tool_result}",
        ],
    )
    async with serve(client, [parent, child]):
        handle = await toren_client.start_run(client, parent.name, "go", run_id=f"{agent_name}-p")
        result = await result_of(handle)
    assert result.text.startswith(
        f"kid: agent {child.name} (ask_kid) gave no answer: BudgetExceeded"
    )
    assert "(what its parent run had left) cannot cover the next model call" in result.text


async def test_cancelling_the_parent_cancels_the_child(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    child = make_agent(
        name=f"{agent_name}_kid",
        tools={"nap": NAP},
        script=[{"tool_calls": [{"id": "n", "name": "nap", "args": {"seconds": 60}}]}, "woke"],
    )
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        script=[{"tool_calls": [call("ask_kid", "sleep", "k1")]}, "done"],
    )
    async with serve(client, [parent, child]):
        handle = await toren_client.start_run(client, parent.name, "go", run_id=f"{agent_name}-p")
        kid = client.get_workflow_handle(f"{handle.id}/ask_kid/k1")

        async def kid_napping() -> bool:
            try:
                return any(
                    e.HasField("activity_task_started_event_attributes")
                    for e in (await kid.fetch_history()).events
                )
            except Exception:
                return False

        await wait_for(kid_napping, timeout=30)
        await handle.cancel()

        async def kid_status() -> WorkflowExecutionStatus | None:
            return (await kid.describe()).status

        await wait_for(lambda: _is(kid_status(), WorkflowExecutionStatus.CANCELED), timeout=30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


async def _is(status: Any, wanted: WorkflowExecutionStatus) -> bool:
    return bool(await status == wanted)


async def test_a_childs_approval_is_decided_through_the_parent(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    child = make_agent(
        name=f"{agent_name}_kid",
        tools={"gated": GATED},
        script=[
            {"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]},
            "kid: {last_tool_result}",
        ],
    )
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        script=[{"tool_calls": [call("ask_kid", "do it", "k1")]}, "parent: {last_tool_result}"],
    )
    async with serve(client, [parent, child]):
        handle = await toren_client.start_run(client, parent.name, "go", run_id=f"{agent_name}-p")
        waiting = await toren_client.wait_for_approval(client, handle.id, timeout=30)
        child_id = f"{handle.id}/ask_kid/k1"
        assert [(w.call_id, w.run_id, w.path) for w in waiting] == [
            ("g1", child_id, [parent.name, child.name, "gated"])
        ]
        # The inbox lists it once, from the child, with its path.
        items = [i for i in await toren_client.inbox(client) if i.run_id.startswith(handle.id)]
        assert [(i.run_id, i.call.path) for i in items] == [
            (child_id, [parent.name, child.name, "gated"])
        ]
        # Junk on the children's signal (anyone may send it) is refused and recorded; the run
        # goes on and still takes its decision.
        junk = [
            {"event": "requested", "run_id": f"{child_id}x", "call_id": "c", "path": [],
             "step": "abc"},
            {"event": "requested", "run_id": child_id, "call_id": "c", "path": [], "step": "abc"},
            {"event": "requested", "run_id": child_id, "call_id": "c", "path": [], "step": 1e300},
            {"event": "requested", "run_id": child_id, "call_id": "c", "path": [],
             "approvers": "bob"},
            "not an object",
        ]  # fmt: skip
        for body in junk:
            await handle.signal("toren_child_approval", body)
        refused = await wait_for(
            lambda: _at_least(handle.query("refused_signals"), len(junk)), timeout=30
        )
        assert [r["reason"] for r in refused][-4:] == [
            "'step' must be an integer", "'step' must be an integer",
            "'approvers' must be a list of names or null", "expected one JSON object",
        ]  # fmt: skip
        reader = asyncio.create_task(_approval_items(client, handle.id))
        decision = await toren_client.decide(client, handle.id, "g1", True, by="ops")
        assert decision.approved and decision.by == "ops"
        result = await result_of(handle)
        live = await asyncio.wait_for(reader, 30)
    assert result.text == "parent: kid: gated ran"
    assert [(i["type"], i["run_id"], i["path"]) for i in live] == [
        ("approval_requested", child_id, [parent.name, child.name, "gated"]),
        ("approval_decided", child_id, [parent.name, child.name, "gated"]),
    ]
    assert live[1]["approved"] is True and live[1]["by"] == "ops"
    # The child's word to its parent is no refused signal in the parent's log; the child's own
    # log, nested under the call, has the approval.
    nested = await toren_client.nested_events(client, handle.id)
    assert not [e for e in nested if e["type"] == "SignalRefused"]
    [resolved] = [e for e in nested if e["type"] == "ApprovalResolved"]
    assert resolved["depth"] == 1 and resolved["by"] == "ops"


async def _at_least(query: Any, n: int) -> list[dict[str, Any]] | None:
    found: list[dict[str, Any]] = await query
    return found if len(found) >= n else None


async def _approval_items(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [
        event.data
        async for event in toren_client.stream(client, run_id)
        if event.type.startswith("approval_")
    ]


def test_bad_agents_entries_name_the_key(
    make_agent: Callable[..., Path], agent_name: str, tmp_path: Path
) -> None:
    child = make_agent(name=f"{agent_name}_kid")
    folder = make_agent(
        tools={"nap": NAP},
        agents={
            "nap": {"agent": f"../{child.name}"},
            "ghost": {"agent": "../missing"},
            "Bad-Name": {"agent": f"../{child.name}"},
        },
        limits={"maxParallelAgents": 0},
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "limits.maxParallelAgents: " in text
    assert "agents.Bad-Name" in text and "must match [a-z][a-z0-9_]*" in text
    # With the file's own keys right, the folders are checked.
    folder2 = make_agent(
        name=f"{agent_name}_two",
        tools={"nap": NAP},
        agents={
            "nap": {"agent": f"../{child.name}"},
            "ghost": {"agent": "../missing"},
        },
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder2)
    text = str(err.value)
    assert "agents.nap: the tool name 'nap' is also the agent's tool" in text
    assert "agents.ghost.agent: no agent folder at '../missing'" in text
    # `toren check` says the same.
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", str(folder2)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert "agents.ghost.agent: no agent folder at '../missing'" in out.stderr
    both = make_agent(
        name=f"{agent_name}_three",
        agents={"both": {"agent": f"../{child.name}"}},
        processes={"both": {"agent": f"../{child.name}"}},
    )
    with pytest.raises(ConfigError, match="agents: 'both' is both an agent tool and a process"):
        load_agent(both)


async def test_a_worker_killed_while_the_child_runs_starts_no_second_child(
    client: Client, make_agent: Callable[..., Path], agent_name: str, dev_server: DevServer
) -> None:
    child = make_agent(
        name=f"{agent_name}_kid",
        tools={"nap": NAP},
        script=[{"tool_calls": [{"id": "n", "name": "nap", "args": {"seconds": 3}}]}, "kid woke"],
    )
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        script=[{"tool_calls": [call("ask_kid", "nap", "k1")]}, "parent: {last_tool_result}"],
    )
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    command = [sys.executable, "-m", "toren.cli", "worker", str(parent), str(child)]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen(command, env=env, **quiet)]  # type: ignore[call-overload]
    try:
        handle = await toren_client.start_run(client, parent.name, "go", run_id=f"{agent_name}-p")
        kid = client.get_workflow_handle(f"{handle.id}/ask_kid/k1")

        async def kid_napping() -> bool:
            try:
                return any(
                    e.HasField("activity_task_started_event_attributes")
                    for e in (await kid.fetch_history()).events
                )
            except Exception:
                return False

        await wait_for(kid_napping, timeout=60)
        procs[0].send_signal(signal.SIGKILL)  # parent waiting on the child, child mid-nap
        procs[0].wait()
        procs.append(subprocess.Popen(command, env=env, **quiet))  # type: ignore[call-overload]
        result = await asyncio.wait_for(handle.result(), timeout=90)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert result.text == "parent: kid woke"
    history = await fetch_history(client, handle.id)
    starts = [
        e
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert len(starts) == 1
    children = [w.id async for w in client.list_workflows(f'WorkflowId STARTS_WITH "{handle.id}/"')]
    assert children == [kid.id]
    assert not task_failures(history)


async def test_a_threads_child_call_is_decided_through_the_thread(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    child = make_agent(
        name=f"{agent_name}_kid",
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]}, "kid: done"],
    )
    parent = make_agent(
        agents={"ask_kid": {"agent": f"../{child.name}"}},
        script=[{"tool_calls": [call("ask_kid", "do it", "k1")]}, "parent: {last_tool_result}"],
    )
    async with serve(client, [parent, child]):
        thread = await toren_client.start_thread(client, parent.name)
        answer = asyncio.create_task(toren_client.send_message(client, thread.id, "go"))
        [waiting] = await toren_client.wait_for_approval(client, thread.id, timeout=30)
        assert waiting.call_id == "g1" and waiting.run_id == f"{thread.id}#1/ask_kid/k1"
        assert waiting.path == [parent.name, child.name, "gated"]
        await toren_client.decide(client, thread.id, "g1", True, by="ops")
        outcome = await asyncio.wait_for(answer, 60)
        assert outcome["text"] == "parent: kid: done"
        assert await thread.query("refused_signals") == []
        await toren_client.close_thread(client, thread.id)
