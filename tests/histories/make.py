"""Record the committed histories that `tests/test_replay.py` replays.

    .venv/bin/python -m tests.histories.make

Runs one `AgentRun` (or `AgentThread`) per path of the workflow on a throwaway dev server and writes each
history to `tests/histories/<path>.json`. Regenerate only when adding a path: an existing file
is the old code's history, and it must keep replaying (guard changes with `workflow.patched`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import DevServer
from toren import client as toren_client
from toren.connect import connect
from toren.worker import serve

HERE = Path(__file__).parent

TOOLS = {
    "echo": """
        from toren import define_tool
        tool = define_tool(
            description="Echo.",
            input={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            handler=lambda a, c: "echo:" + a["text"],
        )
    """,
    "lookup": """
        from toren import define_tool
        tool = define_tool(
            description="A pure lookup (runs as a local activity).",
            input={"type": "object", "properties": {"q": {"type": "string"}}},
            effects="none", idempotency="none", timeout_ms=2000,
            handler=lambda a, c: "found " + a.get("q", ""),
        )
    """,
    "gated": """
        from toren import define_tool
        tool = define_tool(description="Needs a person.", approval="always",
                           approval_timeout=2, handler=lambda a, c: "gated ran")
    """,
    "slow": """
        import asyncio
        from toren import define_tool
        async def slow(a, c):
            await asyncio.sleep(5)
        tool = define_tool(description="Too slow.", timeout_ms=200, handler=slow)
    """,
    "flaky": """
        from temporalio.exceptions import ApplicationError
        from toren import define_tool
        def flaky(a, c):
            raise ApplicationError("upstream 503", non_retryable=False)
        tool = define_tool(description="Always retryable failure.", max_attempts=2, handler=flaky)
    """,
    "flaky_lookup": """
        from temporalio.exceptions import ApplicationError
        from toren import define_tool
        def flaky_lookup(a, c):
            raise ApplicationError("lookup 503", non_retryable=False)
        tool = define_tool(description="A local activity that always fails retryably.",
                           effects="none", idempotency="none", timeout_ms=2000, max_attempts=2,
                           handler=flaky_lookup)
    """,
    "powers": """
        from toren import define_tool
        async def powers(a, c):
            await c.set_value("seen", (await c.get_value("seen") or 0) + 1)
            c.emit("progress", {"at": "powers"})
            inner = await c.invoke_tool("echo", {"text": "inner"})
            c.queue_tool("echo", {"text": "queued"})
            await c.inject_message("user", "note from powers")
            return inner.text + " " + str(len(await c.get_messages()))
        tool = define_tool(description="Every ctx power.", uses=["echo"], handler=powers)
    """,
}


def call(name: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "args": args}


def agent(root: Path, name: str, script: list[Any], **config: Any) -> Path:
    folder = root / name
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.yaml").write_text(
        yaml.safe_dump({"name": name, "model": "mock/scripted", **config})
    )
    (folder / "instructions.md").write_text("Replay fixture.")
    (folder / "mock_script.yaml").write_text(yaml.safe_dump(script))
    for tool, source in TOOLS.items():
        (folder / "tools" / f"{tool}.py").write_text(textwrap.dedent(source))
    return folder


Drive = Callable[[Client, str], Awaitable[None]]


async def approve(client: Client, run_id: str) -> None:
    await _wait_pending(client, run_id)
    await client.get_workflow_handle(run_id).signal("approve", {"call_id": "g", "by": "replay"})


async def deny(client: Client, run_id: str) -> None:
    await _wait_pending(client, run_id)
    await client.get_workflow_handle(run_id).signal("deny", {"call_id": "g", "by": "replay"})


async def malformed(client: Client, run_id: str) -> None:
    await _wait_pending(client, run_id)
    handle = client.get_workflow_handle(run_id)
    await handle.signal("approve")
    await handle.signal("approve", {})
    await handle.signal("approve", "g")
    await toren_client.approve(client, run_id, "g", by="replay")


async def _wait_pending(client: Client, run_id: str) -> None:
    for _ in range(200):
        if await toren_client.pending(client, run_id):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(run_id)


PATHS: dict[str, tuple[list[Any], dict[str, Any], Drive | None]] = {
    "plain": (["hello"], {}, None),
    "parallel_tools": (
        [
            {
                "tool_calls": [
                    call("echo", "a", text="1"),
                    call("echo", "b", text="2"),
                    call("lookup", "c", q="x"),
                    call("nope", "d"),
                ]
            },
            "done",
        ],
        {},
        None,
    ),  # fmt: skip
    "approval_granted": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, approve),
    "approval_denied": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, deny),
    "approval_expired": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, None),
    "malformed_signal": ([{"tool_calls": [call("gated", "g")]}, "done"], {}, malformed),
    "timeout": ([{"tool_calls": [call("slow", "s")]}, "done"], {}, None),
    "fail_closed": ([{"tool_calls": [call("flaky", "f")]}, "done"], {}, None),
    # Recorded before `toren-local-tool-fails-closed` too, as local_fail_closed_unpatched.json.
    "local_fail_closed": ([{"tool_calls": [call("flaky_lookup", "f")]}, "done"], {}, None),
    "budget_exhausted": (
        [{"tool_calls": [call("echo", f"e{i}", text="x")]} for i in range(5)],
        {"limits": {"maxStepsPerTask": 3}},
        None,
    ),  # fmt: skip
    "context_powers": ([{"tool_calls": [call("powers", "p")]}, "done"], {}, None),
    # A tool call written as text; recorded before `toren-tool-call-as-text` too, as
    # tool_call_as_text_unpatched.json (that run ends with the text as its answer).
    "tool_call_as_text": (
        ['<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call>', "done"],
        {},
        None,
    ),
    "continue_as_new": (
        [*[{"tool_calls": [call("echo", f"e{i}", text=str(i))]} for i in range(30)], "done"],
        {"limits": {"continueAsNewAfterEvents": 100}},
        None,
    ),  # fmt: skip
}


async def two_messages(client: Client, thread_id: str) -> None:
    await toren_client.send_message(client, thread_id, "first", message_id="m1")
    await toren_client.send_message(client, thread_id, "second", message_id="m2")
    await toren_client.close_thread(client, thread_id, by="replay", wait=False)


async def approved_in_thread(client: Client, thread_id: str) -> None:
    await toren_client.send_message(client, thread_id, "first", message_id="m1")
    sending = asyncio.ensure_future(
        toren_client.send_message(client, thread_id, "second", message_id="m2")
    )
    await approve(client, thread_id)
    await sending
    await toren_client.send_message(client, thread_id, "queued", message_id="m3", wait=False)
    await toren_client.send_message(client, thread_id, "third", message_id="m4")
    await toren_client.close_thread(client, thread_id, by="replay", wait=False)


async def many_messages(client: Client, thread_id: str) -> None:
    for n in range(8):
        await toren_client.send_message(client, thread_id, f"m{n}", message_id=f"m{n}")
    await toren_client.close_thread(client, thread_id, by="replay", wait=False)


async def idle(client: Client, thread_id: str) -> None:
    await toren_client.send_message(client, thread_id, "only", message_id="m1")


THREAD_PATHS: dict[str, tuple[list[Any], dict[str, Any], Drive]] = {
    "thread_two_messages": (
        ["one", {"tool_calls": [call("echo", "e", text="x")]}, "two"],
        {},
        two_messages,
    ),
    "thread_approval": (
        ["one", {"tool_calls": [call("gated", "g")]}, "two", "three", "four"],
        {"limits": {"approvalTimeoutMin": 10}},
        approved_in_thread,
    ),
    "thread_continue_as_new": (
        [s for n in range(8) for s in ({"tool_calls": [call("echo", f"e{n}", text="x")]}, "ok")],
        {"limits": {"continueAsNewAfterEvents": 100}},
        many_messages,
    ),
    "thread_idle": (["only"], {"limits": {"threadIdleTimeoutMin": 0.03}}, idle),
    # Recorded before `toren-tool-call-as-text` too, as thread_tool_call_as_text_unpatched.json.
    "thread_tool_call_as_text": (
        ['<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call>', "fixed", "two"],
        {},
        two_messages,
    ),
}


async def record(root: Path, client: Client, path: str) -> None:
    if path in THREAD_PATHS:
        script, config, drive = THREAD_PATHS[path]
    else:
        script, config, maybe = PATHS[path]
    name = f"replay_{path}"
    folder = agent(root, name, script, **config)
    async with serve(client, [folder]):
        if path in THREAD_PATHS:
            handle = await toren_client.start_thread(
                client, name, thread_id=f"replay-{path}", user_id="replay"
            )
            await drive(client, handle.id)
        else:
            handle = await toren_client.start_run(client, name, "go", run_id=f"replay-{path}")
            if maybe:
                await maybe(client, handle.id)
        with contextlib.suppress(WorkflowFailureError):  # budget_exhausted fails by design
            await handle.result()
    histories = []
    run: str | None = None
    while True:
        history = await client.get_workflow_handle(handle.id, run_id=run).fetch_history()
        histories.append(json.loads(history.to_json()))
        run = (
            history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
            or None
        )
        if run is None:
            break
    for i, data in enumerate(reversed(histories)):
        suffix = f".{i}" if len(histories) > 1 else ""
        (HERE / f"{path}{suffix}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"recorded {path} ({len(histories)} run(s))")


async def main(paths: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(Path(tmp))
        server.start()
        try:
            client = await connect(target_host=server.address)
            for path in paths or [*PATHS, *THREAD_PATHS]:
                await record(Path(tmp), client, path)
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
