"""What the `toren` command tells a person: where it looked for the server, what a run waits
for, how to go on after Ctrl-C, and event logs of any run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent, WorkflowTaskFailedEventAttributes
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import DevServer, result_of
from tests.test_model_retries import completion
from toren import client as toren_client
from toren.client._events import format_event, render
from toren.store import _payloads as storage
from toren.worker import serve
from toren.worker._agent import load_agent
from toren.worker.models._openai import OpenAIModel

ROOT = Path(__file__).resolve().parent.parent


def _env(address: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOREN_UI", "TEMPORAL_UI"))}
    return {**env, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT), **extra}


async def _cli(address: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True, text=True, env=_env(address, **extra), timeout=120,
    )  # fmt: skip


async def test_an_unreachable_server_gives_one_line_saying_where_and_what_to_do(
    tmp_path: Path,
) -> None:
    for args in (["events", "nope"], ["pending"], ["run", str(ROOT / "examples/support"), "hi"]):
        out = await _cli("127.0.0.1:7999", *args)
        assert out.returncode == 1, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert "127.0.0.1:7999" in lines[0] and "TEMPORAL_ADDRESS" in lines[0]
        assert "temporal server start-dev" in lines[0] and "Traceback" not in out.stderr


async def test_piping_into_head_exits_quietly(dev_server: DevServer) -> None:
    command = (
        f"{sys.executable} -m toren.cli check {ROOT / 'examples/support'} "
        f"{ROOT / 'examples/support'} {ROOT / 'examples/support'} | head -1"
    )
    out = await asyncio.to_thread(
        subprocess.run, ["bash", "-o", "pipefail", "-c", command],
        capture_output=True, text=True, env=_env(dev_server.address), timeout=60,
    )  # fmt: skip
    assert "BrokenPipe" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.startswith("✓ agent")


async def test_no_wait_links_the_web_ui_only_where_it_is_known(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent()
    out = await _cli(dev_server.address, "run", str(folder), "hi", "--no-wait")
    assert out.returncode == 0, out.stderr
    assert "8233" not in out.stdout  # the test server's UI is not on 8233
    out = await _cli(
        dev_server.address, "run", str(folder), "hi", "--no-wait", TOREN_UI_URL="http://ui:9/"
    )
    run_id = out.stdout.split()[1]
    assert f"Web UI: http://ui:9/namespaces/default/workflows/{run_id}" in out.stdout


COUNT = """
from toren import define_tool

tool = define_tool(
    description="Count.", effects="none", idempotency="none", handler=lambda a, c: "x" * 200
)
"""

SLOW = """
import asyncio
from toren import define_tool

async def slow(args, ctx):
    await asyncio.sleep(4)
    return "slept"

tool = define_tool(description="Slow.", timeout_ms=120_000, handler=slow)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "ran")
"""


async def test_run_and_follow_go_through_continue_as_new_to_the_last_run(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    steps = [{"tool_calls": [{"name": "count", "args": {}}]} for _ in range(25)]
    folder = make_agent(
        tools={"count": COUNT},
        script=[*steps, "all done"],
        limits={"continueAsNewAfterEvents": 100},
    )
    async with serve(client, [folder]):
        out = await _cli(dev_server.address, "run", str(folder), "go", "--id", f"{folder.name}-r")
    assert out.returncode == 0, out.stdout + out.stderr
    runs = len(await toren_client.histories(client, f"{folder.name}-r"))
    assert runs >= 2
    assert out.stdout.count("RunContinuedAsNew") == runs - 1
    assert "RunCompleted" in out.stdout and "all done" in out.stdout

    # Following by workflow id, whose latest run is the last one, starts at the first run.
    followed = await _cli(dev_server.address, "events", f"{folder.name}-r", "--follow")
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert "RunStarted" in lines[0] and "go" in lines[0]
    assert "RunCompleted" in lines[-1]
    assert followed.stdout.count("RunContinuedAsNew") == runs - 1


async def test_run_json_writes_only_json_lines_to_stdout(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(script=["all done"])
    async with serve(client, [folder]):
        out = await _cli(dev_server.address, "run", str(folder), "go", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["type"] == "RunStarted" and events[-1]["type"] == "RunCompleted"
    assert "started (agent" in out.stderr  # what a person reads


async def _run_one_call(
    client: Client, make_agent: Callable[..., Path], tool: str, source: str
) -> str:
    """Run an agent whose model calls `tool` once and then says done; the run's id."""
    folder = make_agent(
        tools={tool: source},
        script=[{"tool_calls": [{"id": "c1", "name": tool, "args": {}}]}, "done"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        await result_of(handle)
    return handle.id


async def test_a_local_tool_calls_start_is_when_it_started(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    slow_local = SLOW.replace(
        "timeout_ms=120_000,", 'effects="none", idempotency="none", timeout_ms=6_000,'
    )
    run_id = await _run_one_call(client, make_agent, "slow", slow_local)
    events = await toren_client.events(client, run_id)
    started = next(e for e in events if e["type"] == "ToolCallStarted")
    completed = next(e for e in events if e["type"] == "ToolCallCompleted")
    assert started["local"] is True
    seconds = (
        datetime.fromisoformat(completed["at"].rstrip("Z"))
        - datetime.fromisoformat(started["at"].rstrip("Z"))
    ).total_seconds()
    assert 3.5 <= seconds < 30, (started, completed)


async def _read_until(stream: asyncio.StreamReader, text: str, seen: list[str]) -> None:
    while not any(text in line for line in seen):
        line = await stream.readline()
        if not line:
            raise AssertionError(f"{text!r} never came; got:\n" + "".join(seen))
        seen.append(line.decode())


async def test_run_says_what_it_waits_for_and_how_to_go_on_after_ctrl_c(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(
        tools={"slow": SLOW, "gated": GATED},
        script=[
            {"tool_calls": [{"id": "s1", "name": "slow", "args": {}}]},
            {"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]},
            "done",
        ],
    )
    run_id = f"{folder.name}-w"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "toren.cli", "run", str(folder), "go", "--id", run_id,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_env(dev_server.address),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    try:
        # No worker yet: after a few seconds, say so and how to start one.
        await asyncio.wait_for(_read_until(proc.stdout, "no worker polls", seen), 30)
        assert f"toren worker {folder}" in seen[-1] and folder.name in seen[-1]
        async with serve(client, [folder]):
            await asyncio.wait_for(_read_until(proc.stdout, "tool slow running", seen), 30)
            # The activity's own timeout: the tool's 120 s and the grace toren adds to it.
            assert re.search(r"tool slow running \d+ s of 1[2-9]\d s", seen[-1]), seen[-1]
            await asyncio.wait_for(_read_until(proc.stdout, "— approve with:", seen), 30)
            # With this shell's address in front: another terminal may not have it.
            approve = f"TEMPORAL_ADDRESS={dev_server.address} toren approve {run_id} g1"
            assert f"gated (g1) — approve with: {approve}" in seen[-1], seen[-1]
            proc.send_signal(signal.SIGINT)
            code = await asyncio.wait_for(proc.wait(), 30)
            err = (await proc.stderr.read()).decode()
            assert code == 130, err
            assert f"run {run_id} goes on on the server" in err
            assert f"TEMPORAL_ADDRESS={dev_server.address} toren events {run_id} --follow" in err
            cancel = f"TEMPORAL_ADDRESS={dev_server.address} temporal workflow cancel --workflow-id"
            assert f"{cancel} {run_id}" in err
            assert "Traceback" not in err
            # It did go on: approve it and it completes.
            await toren_client.approve(client, run_id, "g1", by="ops")
            await result_of(client.get_workflow_handle(run_id))
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


BIG = """
from toren import define_tool
tool = define_tool(description="A big result.", handler=lambda a, c: "y" * 300_000)
"""


async def test_events_reads_offloaded_results_through_the_payload_store(
    dev_server: DevServer, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    store = tmp_path / "payloads"
    stored = await Client.connect(
        dev_server.address, data_converter=storage.data_converter(f"file://{store}")
    )
    run_id = await _run_one_call(stored, make_agent, "big", BIG)
    assert any(p.is_file() for p in store.rglob("*"))  # the result did go to the store
    out = await _cli(
        dev_server.address, "events", run_id, "--json", TOREN_PAYLOAD_STORE=f"file://{store}"
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    completed = next(e for e in events if e["type"] == "ToolCallCompleted")
    assert completed["result"] == "y" * 300_000
    assert events[-1]["type"] == "RunCompleted"


async def test_events_renders_a_run_whose_input_was_not_an_object(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent()
    async with serve(client, [folder]):
        handle = await client.start_workflow(
            "AgentRun", "just a string", id=f"{folder.name}-bad",
            task_queue=load_agent(folder).task_queue,
        )  # fmt: skip
        with pytest.raises(WorkflowFailureError):
            await result_of(handle)
    out = await _cli(dev_server.address, "events", handle.id)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "RunStarted" in lines[0] and "just a string" in lines[0]
    assert "RunFailed" in lines[-1] and "InvalidRunInput" in lines[-1]
    followed = await _cli(dev_server.address, "events", handle.id, "--follow")
    assert followed.returncode == 1, followed.stdout  # the exit status says it failed


def test_a_workflow_task_failure_is_an_event() -> None:
    failed = HistoryEvent(
        event_id=4,
        event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        workflow_task_failed_event_attributes=WorkflowTaskFailedEventAttributes(
            cause=WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR,
            failure=Failure(message="nondeterminism: activity type changed"),
        ),
    )
    (event,) = render([failed])
    assert event["type"] == "WorkflowTaskFailed"
    assert event["cause"] == "NON_DETERMINISTIC_ERROR"
    assert event["message"] == "nondeterminism: activity type changed"
    assert "WorkflowTaskFailed" in format_event(event)


async def test_run_shows_a_model_call_being_retried(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= 4:
            body = {"error": {"message": "The server had an error", "type": "error"}}
            return httpx.Response(500, json=body)
        return httpx.Response(200, json=completion("hello after retries"))

    folder = make_agent(model="openai/gpt-4o-mini")
    model = OpenAIModel("sk-x", transport=httpx.MockTransport(handler))
    async with serve(
        client, [folder], environ={"OPENAI_API_KEY": "sk-x"}, models={"openai/gpt-4o-mini": model}
    ):
        out = await _cli(dev_server.address, "run", str(folder), "hi")
    assert out.returncode == 0, out.stdout + out.stderr
    failed = [line for line in out.stdout.splitlines() if "model call failed (HTTP 500)" in line]
    assert failed, out.stdout
    assert re.search(r"attempt \d+/\d+, next in \d+ s", failed[-1]), failed
    assert len(set(failed)) == len(failed)  # a status line only when it changes
    assert "hello after retries" in out.stdout
