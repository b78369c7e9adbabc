"""ToolContext powers on a real dev server: run state, queued and invoked tools, events,
messages, invocation arguments, variables — each durable across worker restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, result_of, secret, task_failures, wait_for
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve
from toren.worker.models import ScriptedModel

STATE = """
from toren import define_tool

async def remember(args, ctx):
    if "set" in args:
        await ctx.set_value("color", args["set"])
        ctx.emit("remembered", {"color": args["set"]})
        return "stored"
    return "color is " + str(await ctx.get_value("color"))

tool = define_tool(
    description="Remember or recall a color.",
    input={"type": "object", "properties": {"set": {"type": "string"}}},
    handler=remember,
)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""

CALLER = """
from toren import define_tool

async def caller(args, ctx):
    target = args["target"]
    if args.get("queue"):
        ctx.queue_tool(target, {})
        return "queued " + target
    result = await ctx.invoke_tool(target, {"text": "inner"} if target == "echo" else {})
    return f"{result.status}: {result.text}"

tool = define_tool(
    description="Call another tool.",
    input={"type": "object", "properties": {"target": {"type": "string"}, "queue": {"type": "boolean"}},
           "required": ["target"]},
    uses=["echo", "gated"],
    handler=caller,
)
"""

ECHO = """
from toren import define_tool
tool = define_tool(
    description="Echo.",
    input={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    handler=lambda a, c: "echo:" + a["text"] + " key=" + c.idempotency_key,
)
"""

TALK = """
from toren import define_tool

async def talk(args, ctx):
    seen = await ctx.get_messages()
    await ctx.inject_message("user", "Also: the customer is a VIP.")
    return f"saw {len(seen)} messages; first={seen[0]['content']}; plan={ctx.arguments.get('plan')}"

tool = define_tool(description="Read and add messages.", handler=talk)
"""

VARS = """
from toren import Variable, define_tool

def use(args, ctx):
    raise RuntimeError("token is " + ctx.env["VAR_TOKEN"])

tool = define_tool(
    description="Uses a variable.",
    variables=[Variable("VAR_TOKEN", type="secret", required=True, description="API token")],
    handler=use,
)
"""


def step(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def call(tool: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": tool, "args": args}


async def test_state_survives_a_killed_worker_and_is_queryable(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(
        tools={"remember": STATE, "gated": GATED},
        script=[
            step(call("remember", "s1", set="blue")),
            step(call("gated", "g")),
            step(call("remember", "s3")),
            "final {last_tool_result}",
        ],
    )
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    cmd = [sys.executable, "-m", "toren.cli", "worker", str(folder)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    try:
        handle = await toren_client.start_run(client, folder.name, "go")
        await wait_for(lambda: toren_client.pending(client, handle.id), timeout=60)
        assert await handle.query("state") == {"color": "blue"}
        first.send_signal(signal.SIGKILL)
        first.wait()
        await handle.signal("approve", {"call_id": "g", "by": "ops"})
        second = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        result = await asyncio.wait_for(handle.result(), timeout=60)
        assert result.text == "final color is blue"
        # A new worker replays the finished run from history: the same state and events.
        assert await handle.query("state") == {"color": "blue"}
        events = await handle.query("events", 0)
        assert [(e["offset"], e["event"], e["data"]) for e in events] == [
            (0, "remembered", {"color": "blue"})
        ]
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    assert "ToolEvent" in [e["type"] for e in render(history)]


async def test_last_writer_in_call_order_wins(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"remember": STATE},
        script=[
            step(call("remember", "a", set="red"), call("remember", "b", set="green")),
            step(call("remember", "c")),
            "{last_tool_result}",
        ],
    )
    async with serve(client, [folder]):
        result = await result_of(toren_client.run_agent(client, folder.name, "go"))
    assert result.text == "color is green"


async def test_invoke_tool_runs_listed_tools_only(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"caller": CALLER, "echo": ECHO, "gated": GATED, "remember": STATE},
        script=[
            step(
                call("caller", "ok", target="echo"),
                call("caller", "unlisted", target="remember"),
                call("caller", "gated", target="gated"),
            ),
            "done",
        ],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(
            client, folder.name, "go", run_id=f"{folder.name}-inv"
        )
        await result_of(handle)
    events = render(await fetch_history(client, handle.id))
    results = {e["callId"]: e["result"] for e in events if e["type"] == "ToolCallCompleted"}
    assert results["ok"] == f"success: echo:inner key={handle.id}:1:ok/echo#1"
    assert results["unlisted"] == (
        "tool caller failed: PermissionError: tool 'caller' cannot invoke 'remember': "
        "it is not in its uses=['echo', 'gated'] (add it to define_tool(uses=[...]))"
    )
    assert "cannot invoke 'gated': it is gated by approval" in results["gated"]
    invoked = [e for e in events if e["type"] == "ToolInvoked"]
    assert [(e["tool"], e["by"]) for e in invoked] == [("echo", "caller")]


BAD_CALLER = """
from toren import define_tool

async def bad_caller(args, ctx):
    found = await ctx.invoke_tool("echo", {"text": args["text"]})
    return f"{found.status}: {found.text}"

tool = define_tool(
    description="Invoke echo with what the model gave.",
    input={"type": "object", "properties": {"text": {}}},
    uses=["echo"],
    handler=bad_caller,
)
"""


async def test_invoke_tool_validates_the_invoked_tools_arguments(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    folder = make_agent(
        tools={"bad_caller": BAD_CALLER, "echo": ECHO},
        script=[step(call("bad_caller", "n", text=5), call("bad_caller", "s", text="ok")), "done"],
    )
    async with serve(client, [folder]):
        await result_of(toren_client.run_agent(client, folder.name, "go", run_id=run_id))
    events = render(await fetch_history(client, run_id))
    results = {e["callId"]: e["result"] for e in events if e["type"] == "ToolCallCompleted"}
    # Checked against echo's schema before its handler: the handler never saw the number.
    assert results["n"] == "error: invalid arguments for echo: text: 5 is not of type 'string'"
    assert results["s"] == f"success: echo:ok key={run_id}:1:s/echo#1"


async def test_queued_gated_tool_parks_for_approval(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"caller": CALLER, "echo": ECHO, "gated": GATED},
        script=[step(call("caller", "q", target="gated", queue=True)), "last: {last_tool_result}"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert calls[0].tool == "gated" and calls[0].call_id == "queued_1_1"
        await toren_client.approve(client, handle.id, "queued_1_1", by="ops")
        result = await result_of(handle)
        transcript = await handle.query("transcript")
    assert result.text == "last: gated ran"
    assert [m["role"] for m in transcript] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert transcript[3]["tool_calls"][0]["name"] == "gated"


async def test_messages_arguments_and_injected_messages(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def after(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "ok: " + messages[-1]["content"]

    folder = make_agent(tools={"talk": TALK})
    model = ScriptedModel([step(call("talk", "t")), after])
    async with serve(client, [folder], models={"mock/scripted": model}):
        result = await result_of(
            toren_client.run_agent(client, folder.name, "hello there", arguments={"plan": "gold"})
        )
    assert result.text == "ok: Also: the customer is a VIP."
    tool_result = seen[0][-2]
    assert tool_result["content"] == "saw 2 messages; first=hello there; plan=gold"
    assert seen[0][-1] == {"role": "user", "content": "Also: the customer is a VIP."}


async def test_missing_variable_reaches_the_model_and_secrets_are_redacted(
    client: Client, make_agent: Callable[..., Path], monkeypatch: Any
) -> None:
    folder = make_agent(
        tools={"use": VARS}, script=[step(call("use", "u")), "saw: {last_tool_result}"]
    )
    monkeypatch.delenv("VAR_TOKEN", raising=False)
    async with serve(client, [folder]):
        result = await result_of(toren_client.run_agent(client, folder.name, "go"))
    assert result.text == (
        "saw: tool use needs variable(s) VAR_TOKEN, missing from the worker's environment"
    )
    token = secret("var-token-6b0f9a2c")
    monkeypatch.setenv("VAR_TOKEN", token)
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    assert result.text == "saw: tool use failed: RuntimeError: token is [redacted]"
    assert token.encode() not in (await fetch_history(client, handle.id)).to_json().encode()


MAKE_FILE = """
import hashlib, os
from toren import Attachment, ToolResult, define_tool

def render(args, ctx):
    data = os.urandom(3 * 1024 * 1024)
    with open(ctx.env["SHA_FILE"], "w") as f:
        f.write(hashlib.sha256(data).hexdigest())
    return ToolResult(result="rendered the chart", attachments=[
        Attachment(name="chart.png", mime_type="image/png", data=data, width=800, height=600)])

tool = define_tool(description="Render a chart.", handler=render)
"""

READ_FILE = """
import hashlib
from toren import define_tool
from toren.store._attachments import open_store

def read(args, ctx):
    return hashlib.sha256(open_store().get_blob(args["id"])).hexdigest()

tool = define_tool(
    description="Read a file back.",
    input={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    handler=read,
)
"""


async def test_returned_attachment_round_trips_by_id_outside_history(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, monkeypatch: Any
) -> None:
    import json as _json

    monkeypatch.setenv("TOREN_ATTACHMENTS", str(tmp_path / "store"))
    sha_file = tmp_path / "sha.txt"

    def read_back(messages: list[dict[str, Any]]) -> dict[str, Any]:
        content = messages[-1]["content"]
        file_id = content.split("chart.png (")[1].split(")")[0]
        return step({"id": "r", "name": "read_file", "args": {"id": file_id}})

    folder = make_agent(
        tools={"make_file": MAKE_FILE, "read_file": READ_FILE},
        env={"required": ["SHA_FILE"]},
    )
    model = ScriptedModel([step(call("make_file", "m")), read_back, "sha {last_tool_result}"])
    async with serve(
        client, [folder], environ={"SHA_FILE": str(sha_file)}, models={"mock/scripted": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "chart it")
        result = await result_of(handle)
    assert result.text == f"sha {sha_file.read_text()}"
    history = await fetch_history(client, handle.id)
    size = sum(e.ByteSize() for e in history.events)
    assert size < 100_000, size
    events = render(history)
    done = next(e for e in events if e["type"] == "ToolCallCompleted" and e["tool"] == "make_file")
    (ref,) = done["attachments"]
    assert ref["name"] == "chart.png" and ref["size"] == 3 * 1024 * 1024 and ref["chunks"] == 2
    assert _json.dumps(ref) in _json.dumps(done)
    assert len(list((tmp_path / "store" / ref["id"] / "blob").glob("*.bin"))) == 2
