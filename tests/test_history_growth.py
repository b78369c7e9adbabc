"""History grows linearly with turns, and each message is in history once.

The model activity gets a transcript reference, not the transcript (toren/transcript.py): if
a change ever passed the conversation again, each turn's events would grow with the turn
number and history would be quadratic. These checks count bytes, never time.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import Client

from tests.conftest import HISTORIES, result_of, task_failures
from toren import client as toren_client
from toren.worker import serve

GROWTH_LIMIT = 1.20
"""History bytes per turn may grow by at most 20% from T=20 to T=200."""

NOOP = """
import hashlib
from toren import define_tool

def noop(args, ctx):
    return result_text(args["i"])

def result_text(i):
    # 200 characters, unique per turn, so each one can be counted in the history.
    return (f"<result {i:04d}>" + hashlib.sha256(str(i).encode()).hexdigest() * 4)[:200]

tool = define_tool(
    description="Does nothing, returns 200 characters.",
    input={"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]},
    effects="external",
    idempotency="keyed",
    handler=noop,
)
"""


def result_text(i: int) -> str:
    """The noop tool's result for turn `i` (the same code as in the tool)."""
    return (f"<result {i:04d}>" + hashlib.sha256(str(i).encode()).hexdigest() * 4)[:200]


def event_bytes(event: Any) -> int:
    return int(event.ByteSize())


async def run_turns(
    client: Client, make_agent: Callable[..., Path], turns: int
) -> tuple[Any, list[int]]:
    # Each run its own agent (and task queue): a fresh name per test and per length.
    """Run `turns` tool turns and a final answer; return the history and bytes per turn."""
    script = [{"tool_calls": [{"name": "noop", "args": {"i": i}}]} for i in range(1, turns + 1)]
    folder = make_agent(
        name=f"g{turns}_{uuid.uuid4().hex[:8]}",
        tools={"noop": NOOP},
        script=[*script, "done"],
        limits={"maxStepsPerTask": turns + 1},
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.steps == turns + 1 and result.tool_calls == turns
    # The first run's history: a continue-as-new (Temporal suggests one when history grows
    # large) would carry the transcript and hide the growth in a later run.
    first = client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
    history = await first.fetch_history()
    HISTORIES.append(history.to_json().encode())
    assert not task_failures(history)
    last = EventType.Name(history.events[-1].event_type)
    assert last == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED", f"T={turns}: first run ended {last}"
    return history, per_turn_bytes(history.events)


def per_turn_bytes(events: list[Any]) -> list[int]:
    """Bytes of each turn: from one `toren.call_model` scheduling to the next."""
    turns: list[int] = []
    for event in events:
        attrs = event.activity_task_scheduled_event_attributes
        if (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and attrs.activity_type.name == "toren.call_model"
        ):
            turns.append(0)
        if turns:
            turns[-1] += event_bytes(event)
    return turns


async def test_history_bytes_per_turn_stay_flat(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    short, _ = await run_turns(client, make_agent, 20)
    long, turns = await run_turns(client, make_agent, 200)
    per_short = sum(event_bytes(e) for e in short.events) / 20
    per_long = sum(event_bytes(e) for e in long.events) / 200
    print(f"history bytes per turn: {per_short:.0f} at T=20, {per_long:.0f} at T=200")
    assert per_long <= GROWTH_LIMIT * per_short

    # The same within one run, without the fixed cost of its start diluting the ratio: the
    # last 20 tool turns weigh about what the first 20 do (step numbers only gain digits).
    tool_turns = turns[:-1]  # the last segment is the final answer, without a tool call
    assert len(tool_turns) == 200
    early, late = sum(tool_turns[:20]) / 20, sum(tool_turns[-20:]) / 20
    print(f"bytes per turn within the run: {early:.0f} (turns 1-20), {late:.0f} (181-200)")
    assert late <= GROWTH_LIMIT * early


async def test_each_tool_result_is_in_history_once(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    history, _ = await run_turns(client, make_agent, 20)
    # The protobuf bytes hold payloads verbatim (`to_json` would base64 them).
    data = History(events=history.events).SerializeToString()
    counts = {i: data.count(result_text(i).encode()) for i in range(1, 21)}
    assert counts == dict.fromkeys(range(1, 21), 1)


async def test_a_short_prompt_rides_in_the_first_model_call_and_a_long_one_is_asked_for(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # A small input saves each run a `transcript` query (a round trip through the server and
    # a workflow task) for one more copy of it in history; a large one is asked for, once.
    folder = make_agent(name=f"p_{uuid.uuid4().hex[:8]}", script=["done"])
    short = "short prompt " + uuid.uuid4().hex
    long = "long prompt " + uuid.uuid4().hex * 300  # ~9.6 KB, over INLINE_INPUT_BYTES
    async with serve(client, [folder]) as runtime:
        copies = {}
        for prompt, misses in ((short, 0), (long, 1)):
            before = runtime.transcripts.misses
            handle = await toren_client.start_run(client, folder.name, prompt)
            assert (await result_of(handle)).text == "done"
            assert runtime.transcripts.misses - before == misses, prompt[:12]
            history = await handle.fetch_history()
            HISTORIES.append(history.to_json().encode())
            assert not task_failures(history)
            scheduled = [
                e
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name
                == "toren.call_model"
            ]
            copies[prompt[:5]] = scheduled[0].SerializeToString().count(prompt.encode())
    # One more copy in history for the short prompt (the first call's input); none for the long.
    assert copies == {"short": 1, "long ": 0}
