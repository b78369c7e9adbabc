"""The integration paths the README promises: TorenPlugin on a user's own Worker, beside the
user's workflow and activity, and a run started on a queue that does not serve its tools."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from tests.conftest import fetch_history, result_of, task_failures, wait_for
from tests.user_app import UserFlow, shout
from toren import AgentRuntime, RunError, TorenPlugin
from toren import client as toren_client
from toren.connect import _plugin as toren_plugin
from toren.worker import serve

LOOKUP = """
from pydantic import BaseModel
from toren import define_tool

class Args(BaseModel):
    order_id: str

tool = define_tool(description="Look it up.", input=Args, approval=lambda a: a.order_id == "big",
                   handler=lambda a, c: f"order {a.order_id}: shipped")
"""


@pytest.mark.parametrize("where", ["client", "worker"])
async def test_toren_plugin_beside_the_users_own_workflow_and_activity(
    make_agent: Callable[..., Path], dev_server: Any, where: str
) -> None:
    folder = make_agent(
        tools={"lookup": LOOKUP},
        script=[
            {"tool_calls": [{"id": "a", "name": "lookup", "args": {"order_id": "A-1"}}]},
            {"tool_calls": [{"id": "b", "name": "lookup", "args": {"order_id": "big"}}]},
            "done: {last_tool_result}",
        ],
    )
    runtime = AgentRuntime.load([folder], environ=os.environ)
    # On the client, Temporal hands the plugin to every worker of that client too.
    plugin = TorenPlugin(runtime)
    client = await Client.connect(dev_server.address, plugins=[plugin] if where == "client" else [])
    queue = folder.name
    async with Worker(
        client,
        task_queue=queue,
        workflows=[UserFlow],
        activities=[shout],
        plugins=[plugin] if where == "worker" else [],
    ):
        mine = await result_of(
            client.execute_workflow(
                UserFlow.run, "hello", id=f"user-{uuid.uuid4().hex[:8]}", task_queue=queue
            )
        )
        handle = await toren_client.start_run(client, folder.name, "go")
        await wait_for(lambda: toren_client.pending(client, handle.id))
        await toren_client.approve(client, handle.id, "b", by="ops")
        result = await asyncio.wait_for(handle.result(), timeout=30)
    assert mine == "HELLO"
    assert result.text == "done: order big: shipped"
    assert not task_failures(await fetch_history(client, handle.id))


async def test_a_run_on_a_queue_without_its_tools_is_refused_at_once(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    first = make_agent(script=["never"], tools={"lookup": LOOKUP})
    other = make_agent(name=f"{agent_name}_b", script=["fine"])
    async with serve(client, [first, other]):
        handle = await toren_client.start_run(
            client,
            first.name,
            "go",
            task_queue=other.name,  # the other agent's queue
        )
        with pytest.raises(WorkflowFailureError) as err:
            await asyncio.wait_for(handle.result(), timeout=30)
    cause = err.value.cause
    assert isinstance(cause, RunError) or cause.__class__.__name__ == "ApplicationError"
    assert getattr(cause, "type", "") == "WrongTaskQueue"
    assert f"agent {first.name!r} is served on task queue {first.name!r}" in str(cause)
    assert f"task_queue={first.name!r}" in str(cause)
    assert not task_failures(await fetch_history(client, handle.id))


async def test_a_parked_run_holds_no_last_completion_and_shares_its_spec(
    make_agent: Callable[..., Path], client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What keeps a parked run as small as a bare workflow (bench/perf/parked_memory.py): its
    # cached instance drops the SDK's last completion once an activation returns, keeps its
    # live stream's items as bytes, shares its agent's decoded spec with the other runs, builds
    # no adapter cache of its own and keeps its approval details as one byte a character.
    # Each of these reaches into SDK internals: this fails if an SDK upgrade moved them.
    instances: list[Any] = []
    create = toren_plugin._Runner.create_instance

    def recording(self: Any, det: Any) -> Any:
        instances.append(create(self, det))
        return instances[-1]

    monkeypatch.setattr(toren_plugin._Runner, "create_instance", recording)
    folder = make_agent(
        tools={"lookup": LOOKUP},
        script=[{"tool_calls": [{"id": "c1", "name": "lookup", "args": {"order_id": "big"}}]}],
    )
    async with serve(client, [folder]):
        runs = [
            await toren_client.start_run(client, folder.name, "go", run_id=f"parked-{uuid.uuid4()}")
            for _ in range(2)
        ]
        for run in runs:
            await toren_client.wait_for_approval(client, run.id, timeout=30)
        sdks = [i.globals_and_locals["__temporal_in_sandbox"].instance for i in instances]
        ids = {run.id for run in runs}
        parked = [sdk for sdk in sdks if sdk._info.workflow_id in ids]
        assert len(parked) == 2
        for sdk in parked:
            assert sdk._current_completion is None
            assert sdk._deployment_version_for_current_task is None
            items = sdk._object._stream._log
            assert items and all(type(i.data).__name__ == "_SerializedPayload" for i in items)
            # No adapter cache of its own (toren's payloads use the shared ones), and the
            # details in ASCII (one character beyond doubles the bytes of the whole text).
            outer = sdk._context_free_payload_converter
            composite = getattr(outer, "_inner_payload_converter", outer)  # the SDK's wrapper
            json_converter = composite.converters[b"json/plain"]
            assert "_type_adapter" not in vars(json_converter)
            assert "waiting for approval" in sdk._current_details
            assert sdk._current_details.isascii()
        first, second = (sdk._object._spec for sdk in parked)
        assert first is second
        with pytest.raises(dataclasses.FrozenInstanceError):
            first.max_steps = 1  # type: ignore[misc]
        for run in runs:
            await client.get_workflow_handle(run.id).terminate("test over")
