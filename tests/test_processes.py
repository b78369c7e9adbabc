"""run_process / check_run: named processes run as child workflows with derived ids; the
parent is told when one finishes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from tests.conftest import fetch_history, result_of, task_failures
from toren import ConfigError, load_agent
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve
from toren.worker.activities._runtime import AgentRuntime
from toren.worker.models import ScriptedModel

NAP = """
import asyncio
from toren import define_tool

async def nap(args, ctx):
    await asyncio.sleep(args.get("seconds", 1))
    return "rested"

tool = define_tool(description="Wait a bit.", input={"type": "object", "properties": {"seconds": {"type": "number"}}}, handler=nap)
"""


def child_agent(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.yaml").write_text(yaml.safe_dump({"name": name, "model": "mock/scripted"}))
    (folder / "instructions.md").write_text("Research.")
    (folder / "mock_script.yaml").write_text(yaml.safe_dump(["the answer is 42"]))
    return folder


def last_tool(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in reversed(messages) if m.get("role") == "tool")


async def test_background_run_is_started_polled_and_reported(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, agent_name: str
) -> None:
    child = child_agent(tmp_path, f"{agent_name}_child")
    parent = make_agent(
        tools={"nap": NAP},
        builtin_tools=["run_process", "check_run"],
        processes={"research": {"agent": f"../{child.name}", "description": "Look it up."}},
    )
    seen: dict[str, Any] = {}

    def poll(messages: list[dict[str, Any]]) -> dict[str, Any]:
        started = json.loads(last_tool(messages)["content"])
        seen["started"] = started
        return {
            "tool_calls": [{"id": "c1", "name": "check_run", "args": {"run_id": started["run_id"]}}]
        }

    def again(messages: list[dict[str, Any]]) -> dict[str, Any]:
        seen["check"] = json.loads(last_tool(messages)["content"])
        return {"tool_calls": [{"id": "r1", "name": "run_process", "args": {"process": "research", "input": "again"}},
                               {"id": "n1", "name": "nap", "args": {"seconds": 2}}]}  # fmt: skip

    def final(messages: list[dict[str, Any]]) -> str:
        seen["second"] = json.loads(
            next(m for m in messages if m.get("tool_call_id") == "r1" and m is not messages[2])[
                "content"
            ]
        )
        notices = [
            m["content"]
            for m in messages
            if m["role"] == "user" and "Background run" in m["content"]
        ]
        return notices[-1] if notices else "no notice"

    model = ScriptedModel(
        [{"tool_calls": [{"id": "r1", "name": "run_process", "args": {"process": "research", "input": "find it"}}]},
         poll, again, final]
    )  # fmt: skip
    async with serve(client, [parent, child]) as runtime:
        runtime.agents[parent.name].provider = model  # the child keeps its own script
        handle = await toren_client.start_run(client, parent.name, "go", run_id=f"{parent.name}-p")
        result = await result_of(handle)
    child_id = f"{handle.id}/research/r1"
    assert seen["started"] == {"run_id": child_id, "process": "research", "started": True}
    assert seen["check"]["run_id"] == child_id
    assert seen["check"]["status"] in ("running", "completed")
    assert seen["second"] == {"run_id": child_id, "process": "research", "started": False}
    assert (
        result.text == f"Background run {child_id} (research) completed. Output:\nthe answer is 42"
    )
    child_result = await result_of(client.get_workflow_handle(child_id))
    assert child_result["text"] == "the answer is 42"
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    kinds = [e["type"] for e in render(history)]
    assert "ProcessStarted" in kinds and "ProcessCompleted" in kinds


def test_processes_config_errors(tmp_path: Path, make_agent: Callable[..., Path]) -> None:
    # Each entry is checked with the rest of agent.yaml, when the folder loads.
    folder = make_agent(
        builtin_tools=["run_process"],
        processes={
            "b": {"workflow": "X", "agent": "y"},
            "c": {"wat": 1},
            "d": {"agnet": "../x"},
        },
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "agent.yaml: processes.b: give exactly one of agent: or workflow:" in text
    assert "agent.yaml: unknown key 'processes.c.wat' (known: agent, description" in text
    assert "agent.yaml: processes.c: give exactly one of agent: or workflow:" in text
    assert "agent.yaml: unknown key 'processes.d.agnet'; did you mean 'agent'?" in text
    # A child agent folder is loaded when the worker starts.
    broken = make_agent(name="broken_child", processes={"a": {"agent": "../missing"}})
    with pytest.raises(ConfigError) as err:
        AgentRuntime.load([load_agent(broken)], environ={})
    assert "agent.yaml: processes.a.agent: " in str(err.value)
    assert "no agent.yaml" in str(err.value)
    bare = make_agent(name="bare_agent", builtin_tools=["run_process"])
    with pytest.raises(ConfigError, match="processes: none declared, and run_process needs"):
        load_agent(bare)
