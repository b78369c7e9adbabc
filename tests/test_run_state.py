"""`RunState` crosses continue-as-new whole: every field, including ones added later.

The first test fills every field (found by introspection, so a new field is covered without
editing the test) and sends the state through a real continue-as-new on the dev server, the
way `AgentRun` does. The second is the bug a hand-kept field list caused: a background run's
completion notice pending at continue-as-new was lost.
"""

from __future__ import annotations

import dataclasses
import types
import typing
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.api.history.v1 import History
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.conftest import fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.agent._types import RunInput, RunState
from toren.worker import serve


@workflow.defn(name="RunStateProbe")
class RunStateProbe:
    """Continues as new once with the state it was given, exactly as `AgentRun` does."""

    @workflow.run
    async def run(self, input: RunInput) -> RunState:
        assert input.carry is not None
        if not workflow.info().continued_run_id:
            workflow.continue_as_new(input.continued_with(input.carry))
        return input.carry


def filled(cls: Any, path: str = "") -> Any:
    """An instance of dataclass `cls` with every field set to a non-default value."""
    hints = typing.get_type_hints(cls)
    return cls(
        **{f.name: _value(hints[f.name], f"{path}{f.name}") for f in dataclasses.fields(cls)}
    )


def _value(tp: Any, name: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)), name)
    if dataclasses.is_dataclass(tp):
        return filled(tp, f"{name}.")
    if tp is bool:
        return True
    if tp is int:
        return 7
    if tp is float:
        return 2.5
    if tp is str:
        return f"{name}-value"
    if origin is list:
        return [_value(args[0], name), _value(args[0], name + "2")]
    if origin is dict:
        return {f"{name}-key": _value(args[1], name)}
    if tp is Any:
        return {"nested": [1, "two", None]}
    raise AssertionError(f"add a value for {tp!r} ({name}) to this test")


def test_the_filler_sets_every_field_off_its_default() -> None:
    state = filled(RunState)
    for f in dataclasses.fields(RunState):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        assert getattr(state, f.name) != default, f.name


async def test_every_field_arrives_after_continue_as_new(client: Client) -> None:
    state = filled(RunState)
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[RunStateProbe],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            RunStateProbe.run,
            RunInput(agent="probe", prompt="p", carry=state),
            id=f"probe-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        arrived = await result_of(handle)
    history = await fetch_history(client, handle.id)
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id, "the state arrived through continue-as-new"
    for f in dataclasses.fields(RunState):
        assert getattr(arrived, f.name) == getattr(state, f.name), f"{f.name} was lost"
    assert arrived == state


@workflow.defn(name="SlowChild")
class SlowChild:
    @workflow.run
    async def run(self, text: str) -> str:
        await workflow.sleep(timedelta(seconds=2))
        return f"child done with {text}"


TICK = """
import asyncio
from toren import define_tool

async def tick(args, ctx):
    await asyncio.sleep(args.get("seconds", 0))
    return "tock"

tool = define_tool(description="Tick.", input={"type": "object", "properties": {"seconds": {"type": "number"}}}, handler=tick)
"""


async def test_a_child_notice_pending_at_continue_as_new_reaches_the_model(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    kids = f"{agent_name}_kids"
    start = {"tool_calls": [{"id": "p1", "name": "run_process",
                             "args": {"process": "slow", "input": "the job"}}]}  # fmt: skip
    ticks = [{"tool_calls": [{"name": "tick", "args": {}}]} for _ in range(10)]
    # The child finishes during these naps; the run is past 100 events by then, so it
    # continues as new at the next turn boundary, with the notice not yet shown to the model.
    naps = [{"tool_calls": [{"name": "tick", "args": {"seconds": 1}}]} for _ in range(5)]
    seen: dict[str, Any] = {}

    def final(messages: list[dict[str, Any]]) -> str:
        notes = [m["content"] for m in messages if "Background run" in str(m.get("content"))]
        seen["notes"] = notes
        return notes[-1] if notes else "no notice"

    folder = make_agent(
        tools={"tick": TICK},
        builtin_tools=["run_process", "check_run"],
        processes={"slow": {"workflow": "SlowChild", "task_queue": kids}},
        limits={"continueAsNewAfterEvents": 100, "maxStepsPerTask": 30},
    )
    async with (
        Worker(client, task_queue=kids, workflows=[SlowChild],
               workflow_runner=UnsandboxedWorkflowRunner()),
        serve(client, [folder]) as runtime,
    ):  # fmt: skip
        from toren.worker.models import ScriptedModel

        runtime.agents[agent_name].provider = ScriptedModel([start, *ticks, *naps, final])
        handle = await toren_client.start_run(client, agent_name, "go", run_id=f"{agent_name}-r")
        result = await result_of(handle)
    child_id = f"{handle.id}/slow/p1"
    assert (
        result.text
        == f"Background run {child_id} (slow) completed. Output:\nchild done with the job"
    )
    assert len(seen["notes"]) == 1
    history = await fetch_history(client, handle.id)
    assert history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    assert not task_failures(history)
    # The continued run recorded the spec again: a policy never comes from the run's input.
    assert b"toren.agent_spec" in History(events=history.events).SerializeToString()
