"""`toren fork` and `toren.client.fork_run`: a new run from a recorded run's conversation at a step.

What a fork must never do is run again what ran before its step: the tools here append a line
to a file each time they run, so their executions are counted outside Temporal.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.conftest import ROOT, fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve
from toren.worker.models import ScriptedModel

LOOKUP = """
from toren import define_tool

async def lookup(args, ctx):
    with open(LOG, "a") as f:
        f.write("lookup\\n")
    await ctx.set_value("looked_up", args["order_id"])
    return f"order {args['order_id']}: paid 40 EUR, arrived broken"

tool = define_tool(
    description="Look an order up.",
    input={"type": "object", "properties": {"order_id": {"type": "string"}}},
    effects="external",
    idempotency="none",
    handler=lookup,
)
"""

REFUND = """
from toren import define_tool

def refund(args, ctx):
    with open(LOG, "a") as f:
        f.write("refund\\n")
    return f"refunded {args['order_id']}"

tool = define_tool(
    description="Refund an order.",
    input={"type": "object", "properties": {"order_id": {"type": "string"}}},
    effects="external",
    idempotency="none",
    handler=refund,
)
"""

COUNT = """
from toren import define_tool

async def count(args, ctx):
    with open(LOG, "a") as f:
        f.write(f"count {args['n']}\\n")
    before = await ctx.get_value("n")
    await ctx.set_value("n", args["n"])
    return f"n was {before}"

tool = define_tool(
    description="Count.",
    input={"type": "object", "properties": {"n": {"type": "integer"}}},
    effects="external",
    idempotency="none",
    handler=count,
)
"""

NOTE = """
from toren import define_tool

async def note(args, ctx):
    path = (await ctx.workspace()) / "notes.txt"
    with path.open("a") as f:
        f.write(args["text"] + "\\n")
    return path.read_text()

tool = define_tool(
    description="Add a line to notes.txt and read it back.",
    input={"type": "object", "properties": {"text": {"type": "string"}}},
    effects="sandbox",
    handler=note,
)
"""


def call(tool: str, id: str, **args: Any) -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"id": id, "name": tool, "args": args}]}


def tools(log: Path, **sources: str) -> dict[str, str]:
    """The tools' sources, each writing its runs to `log`."""
    return {name: f"LOG = {str(log)!r}\n" + source for name, source in sources.items()}


def ran(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def saw(messages: list[dict[str, Any]]) -> str:
    """A model step that says what it was shown: the user's words and the tools' results."""
    shown = [str(m.get("content")) for m in messages if m.get("role") in ("user", "tool")]
    return "saw: " + " | ".join(shown)


async def fork_events(client: Client, run_id: str) -> list[dict[str, Any]]:
    history = await fetch_history(client, run_id)
    assert not task_failures(history)
    return render(history)


async def details(client: Client, run_id: str) -> str:
    metadata = await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata")
    return str(metadata.current_details)


REFUND_SCRIPT = [
    call("lookup", "l1", order_id="A-1"),
    call("refund", "r1", order_id="A-1"),
    "refunded: {last_tool_result}",
]


async def test_a_fork_runs_nothing_before_its_step_again(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND))
    changed = ScriptedModel([call("lookup", "l9", order_id="A-9"), saw])
    queue = f"fork-{uuid.uuid4().hex[:8]}"
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}),
        serve(client, [folder], models={"mock/scripted": changed}, task_queue=queue),
    ):
        source = await toren_client.start_run(client, folder.name, "My order A-1 broke")
        assert (await result_of(source)).text == "refunded: refunded A-1"
        assert ran(log) == ["lookup", "refund"]
        # Step 2: after the lookup, before the refund; a model that answers differently.
        fork = await toren_client.fork_run(client, source.id, 2, task_queue=queue)
        result = await result_of(fork)
        state = await fork.query("state")
        shown = await details(client, fork.id)
    # The lookup's result is in what the fork's model saw; neither tool ran again.
    assert result.text == "saw: My order A-1 broke | order A-1: paid 40 EUR, arrived broken"
    assert ran(log) == ["lookup", "refund"]
    assert state == {"looked_up": "A-1"}
    events = await fork_events(client, fork.id)
    assert events[0]["type"] == "RunStarted"
    assert events[0]["forkedFrom"] == {"runId": source.id, "step": 2}
    assert [e["step"] for e in events if e["type"] == "LlmCallStarted"] == [2]
    assert not [e for e in events if e["type"].startswith("ToolCall")]
    assert f"forked from {source.id} at step 2" in shown


async def test_a_fork_across_continue_as_new(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, count=COUNT), limits={"continueAsNewAfterEvents": 100})
    script: list[Any] = [call("count", f"c{n}", n=n) for n in range(1, 15)] + ["counted"]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        source = await toren_client.start_run(client, folder.name, "count to 14")
        assert (await result_of(source)).steps == 15
        chain = await toren_client.histories(client, source.id)
        fork = await toren_client.fork_run(client, source.id, 12)
        result = await result_of(fork)
    # Step 12 is in a later run of the source's chain than its first.
    steps = [[e["step"] for e in render(h) if e["type"] == "LlmCallStarted"] for h in chain]
    assert len(chain) >= 2 and 12 not in steps[0], steps
    # The fork ran steps 12 to 15 with the state step 12 saw; nothing before step 12 again.
    assert ran(log) == [f"count {n}" for n in range(1, 15)] + ["count 12", "count 13", "count 14"]
    assert (result.text, result.steps) == ("counted", 15)
    events = await fork_events(client, fork.id)
    completed = [e["result"] for e in events if e["type"] == "ToolCallCompleted"]
    assert completed == ["n was 11", "n was 12", "n was 13"]


async def test_a_fork_of_one_execution_of_a_thread(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP))
    script = [call("lookup", "l1", order_id="A-1"), saw, call("lookup", "l2", order_id="B-2"), saw]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        thread = await toren_client.start_thread(client, folder.name)
        await toren_client.send_message(client, thread.id, "first")
        await toren_client.send_message(client, thread.id, "second")
        assert ran(log) == ["lookup", "lookup"]
        second = await toren_client.fork_run(client, thread.id, 2, execution=2)
        first = await toren_client.fork_run(client, thread.id, 2, execution=1)
        texts = [(await result_of(second)).text, (await result_of(first)).text]
        await toren_client.close_thread(client, thread.id)
    order_a, order_b = (
        "order A-1: paid 40 EUR, arrived broken",
        "order B-2: paid 40 EUR, arrived broken",
    )
    assert texts == [
        f"saw: first | {order_a} | second | {order_b}",
        f"saw: first | {order_a}",
    ]
    assert ran(log) == ["lookup", "lookup"]
    events = await fork_events(client, second.id)
    assert events[0]["forkedFrom"] == {"runId": thread.id, "step": 2, "execution": 2}


async def test_a_fork_restores_the_workspace_its_step_had(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"note": NOTE})
    script = [call("note", "n1", text="a"), call("note", "n2", text="b"), "{last_tool_result}"]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        source = await toren_client.start_run(client, folder.name, "take notes")
        assert (await result_of(source)).text == "a\nb\n"
        fork = await toren_client.fork_run(client, source.id, 2)
        # Step 2 writes "b" again over the files step 1 left, not over the source's last ones.
        assert (await result_of(fork)).text == "a\nb\n"


# -- the command ---------------------------------------------------------------------------


def _env(address: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOREN_UI", "TEMPORAL_UI"))}
    return {**env, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT)}


async def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, env=_env(address), timeout=120,
    )  # fmt: skip


async def test_bad_input_is_one_clear_line(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    folder = make_agent(script=["done"])
    async with serve(client, [folder]):
        source = await toren_client.start_run(client, folder.name, "hi")
        await result_of(source)
        thread = await toren_client.start_thread(client, folder.name)
        await toren_client.send_message(client, thread.id, "hello")
        cases = {
            "no run 'no-such-run'": ["no-such-run", "--at-step", "1"],
            "model calls 1 to 1; step 4 is past its end": [source.id, "--at-step", "4"],
            "is a thread: fork one of its executions": [thread.id, "--at-step", "1"],
            "--execution 3 is past its end": [thread.id, "--at-step", "1", "--execution", "3"],
            "--model needs --agent DIR": [source.id, "--at-step", "1", "--model", "mock/echo"],
        }
        outs = await asyncio.gather(
            *(cli(dev_server.address, "fork", *args) for args in cases.values())
        )
        await toren_client.close_thread(client, thread.id)
    for said, out in zip(cases, outs, strict=True):
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (said, out.stderr)
        assert len(lines) == 1 and said in lines[0], (said, out.stderr)
        assert "Traceback" not in out.stderr


async def test_fork_with_a_changed_agent_through_the_command(
    client: Client, make_agent: Callable[..., Path], dev_server: Any, tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND), script=REFUND_SCRIPT)
    async with serve(client, [folder]):
        source = await toren_client.start_run(client, folder.name, "My order A-1 broke")
        await result_of(source)
        # The command serves the folder itself, with the echo model, on a queue of its own.
        out = await cli(
            dev_server.address, "fork", source.id, "--at-step", "2", "--agent", str(folder),
            "--model", "mock/echo", "--prompt-append", "Why?", "--json",
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = [json.loads(line) for line in out.stdout.splitlines()]
    assert printed[0]["type"] == "RunStarted"
    assert printed[0]["forkedFrom"] == {"runId": source.id, "step": 2}
    assert printed[-1]["type"] == "RunCompleted" and printed[-1]["text"] == "echo: Why?"
    assert ran(log) == ["lookup", "refund"]
    fork_id = out.stderr.split()[1]
    history = await fetch_history(client, fork_id)
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.task_queue.name == f"{fork_id}.fork"


GATED_REFUND = REFUND.replace('idempotency="none",', 'idempotency="none",\n    approval="always",')


async def test_a_fork_of_a_running_run(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=GATED_REFUND))
    queue = f"fork-{uuid.uuid4().hex[:8]}"
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}),
        serve(
            client, [folder], models={"mock/scripted": ScriptedModel([saw] * 3)}, task_queue=queue
        ),
    ):
        source = await toren_client.start_run(client, folder.name, "My order A-1 broke")
        [waiting] = await toren_client.wait_for_approval(client, source.id)
        # The source waits for a person on its step-2 refund; the fork goes on from step 2.
        fork = await toren_client.fork_run(client, source.id, 2, task_queue=queue)
        result = await result_of(fork)
        await toren_client.deny(client, source.id, waiting.call_id, by="test")
        await result_of(source)
    assert result.text == "saw: My order A-1 broke | order A-1: paid 40 EUR, arrived broken"
    assert ran(log) == ["lookup"]
