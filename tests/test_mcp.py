"""MCP servers as tools: real servers (tests/mcp_servers/demo.py) over stdio and HTTP, real runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from tests.conftest import fetch_history, result_of, secret, task_failures, wait_for
from toren import ConfigError, load_agent
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.worker import serve
from toren.workflows import AgentRun, AgentThread

DEMO = Path(__file__).resolve().parent / "mcp_servers" / "demo.py"


def stdio(**keys: Any) -> dict[str, Any]:
    """A `mcp_servers` entry running the demo server over stdio."""
    return {"command": [sys.executable, str(DEMO)], **keys}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[str]]]:
    """The demo server over streamable HTTP (uvicorn in a thread): its URL, and the
    Authorization headers it received."""
    with serving_http(free_port()) as served:
        yield served


@contextlib.contextmanager
def serving_http(port: int) -> Iterator[tuple[str, list[str]]]:
    """Serve the demo server over streamable HTTP on `port` while the block runs."""
    import uvicorn
    from starlette.types import ASGIApp, Receive, Scope, Send

    from tests.mcp_servers.demo import server

    seen: list[str] = []
    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            seen.append(headers.get(b"authorization", b"").decode())
        await inner(scope, receive, send)

    asgi: ASGIApp = app
    web = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not web.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert web.started
    try:
        yield f"http://127.0.0.1:{port}/mcp", seen
    finally:
        web.should_exit = True
        thread.join(10)


def kill_given(variable: str) -> None:
    """SIGKILL every process started with `variable` (`NAME=value`) in its environment."""
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if variable.encode() in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    assert killed, f"no process runs with {variable}"


def completed(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["callId"]: e for e in events if e["type"] == "ToolCallCompleted"}


def scheduled(history: Any) -> list[str]:
    """The tool activities scheduled (not toren's own, such as `toren.call_model`)."""
    names = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return [n for n in names if not n.startswith("toren.")]


async def run(
    client: Client, folder: Path, environ: dict[str, str] | None = None
) -> tuple[str, Any, dict[str, dict[str, Any]]]:
    """Serve `folder`, run it to the end: its answer, history and finished calls by id."""
    async with serve(client, [folder], environ=environ or {}):
        handle = await toren_client.start_run(client, folder.name, "go")
        result = await result_of(handle)
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    return result.text, history, completed(render(history))


async def test_lists_calls_validates_and_reports_errors(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    folder = make_agent(
        mcp_servers={"demo": stdio(tools=["add", "fail"])},
        script=[
            {"tool_calls": [
                {"id": "ok", "name": "demo__add", "args": {"a": 2, "b": 3}},
                {"id": "bad", "name": "demo__add", "args": {"a": "two", "b": 3}},
                {"id": "err", "name": "demo__fail", "args": {"why": "not today"}},
                {"id": "hidden", "name": "demo__hang", "args": {}},
            ]},
            "done",
        ],
    )  # fmt: skip
    async with serve(client, [folder], environ={}) as runtime:
        spec = runtime.agents[agent_name].spec()
    tools = {t.name: t for t in spec.tools}
    assert sorted(tools) == ["demo__add", "demo__fail"]  # the allow-list left hang out
    assert tools["demo__add"].schema["properties"].keys() == {"a", "b"}
    assert (tools["demo__add"].effects, tools["demo__add"].idempotency) == ("external", "keyed")

    text, history, calls = await run(client, folder)
    assert text == "done"
    # The recorded spec is what a replay reads: no worker, no server.
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(
        WorkflowHistory.from_json(history.workflow_id, history.to_json())
    )
    assert (calls["ok"]["result"], calls["ok"]["isError"]) == ("5", False)
    assert calls["bad"]["isError"]
    assert calls["bad"]["result"].startswith("invalid arguments for demo__add: ")
    assert calls["err"]["isError"] and "refused: not today" in calls["err"]["result"]
    assert calls["hidden"]["result"] == "unknown tool: demo__hang"
    # The bad call never reached the server: one activity for add, one for fail.
    assert sorted(scheduled(history)) == [f"{agent_name}.demo__add", f"{agent_name}.demo__fail"]


async def test_a_server_killed_mid_call_is_restarted_and_the_call_retried(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    starts, marker = tmp_path / "starts.txt", tmp_path / "died"
    folder = make_agent(
        env={"required": ["DEMO_STARTS"]},
        mcp_servers={"demo": stdio(env=["DEMO_STARTS"], tools={"die_once": {"max_attempts": 3}})},
        script=[
            {"tool_calls": [{"id": "c", "name": "demo__die_once", "args": {"marker": str(marker)}}]},
            "got {last_tool_result}",
        ],
    )  # fmt: skip
    text, history, calls = await run(client, folder, {"DEMO_STARTS": str(starts)})
    assert text == "got survived"
    assert marker.exists()
    assert len(starts.read_text().splitlines()) == 2  # listed at start, restarted after the kill
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert 2 in attempts  # the attempt that completed (the first was lost with the server)


async def test_a_server_that_died_idle_is_started_again_before_the_next_call(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    starts = tmp_path / "starts.txt"
    folder = make_agent(
        env={"required": ["DEMO_STARTS"]},
        mcp_servers={"demo": stdio(env=["DEMO_STARTS"], max_attempts=1, tools=["add"])},
        script=[
            {"tool_calls": [{"id": "a", "name": "demo__add", "args": {"a": 1, "b": 2}}]},
            "got {last_tool_result}",
        ],
    )  # fmt: skip
    async with serve(client, [folder], environ={"DEMO_STARTS": str(starts)}):
        first = await result_of(toren_client.run_agent(client, folder.name, "go"))
        # The pid the server wrote is its own namespace's (it runs in bubblewrap): kill the
        # processes that run it, found by the environment they were given.
        kill_given(f"DEMO_STARTS={starts}")
        second = await result_of(toren_client.run_agent(client, folder.name, "again"))
    # One attempt allowed: the second call only works because the pool restarted the server.
    assert (first.text, second.text) == ("got 3", "got 3")
    assert len(starts.read_text().split()) == 2


async def test_a_server_that_hangs_hits_the_timeout(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        mcp_servers={"demo": stdio(timeout_ms=1500, tools={"hang": None, "add": {"timeout_ms": 5000}})},
        script=[
            {"tool_calls": [{"id": "h", "name": "demo__hang"}]},
            {"tool_calls": [{"id": "a", "name": "demo__add", "args": {"a": 1, "b": 2}}]},
            "then {last_tool_result}",
        ],
    )  # fmt: skip
    text, _, calls = await run(client, folder)
    assert calls["h"]["isError"]
    assert calls["h"]["result"] == "tool demo__hang timed out after 1500ms"
    assert text == "then 3"  # the same session still answers other calls


async def test_a_keyed_call_sends_its_idempotency_key(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        mcp_servers={"demo": stdio(tools={"key": None}), "loose": stdio(idempotency="none",
                                                                       tools=["key"])},
        script=[
            {"tool_calls": [{"id": "k", "name": "demo__key"}, {"id": "n", "name": "loose__key"}]},
            "done",
        ],
    )  # fmt: skip
    _, history, calls = await run(client, folder)
    assert calls["k"]["result"] == f"{history.workflow_id}:1:k"  # the same on every attempt
    assert calls["n"]["result"] == "none"


async def test_a_gated_mcp_tool_waits_for_approval(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        mcp_servers={"demo": stdio(tools={"add": {"approval": "always"}})},
        script=[
            {"tool_calls": [{"id": "g", "name": "demo__add", "args": {"a": 20, "b": 22}}]},
            "sum {last_tool_result}",
        ],
    )  # fmt: skip
    async with serve(client, [folder], environ={}):
        handle = await toren_client.start_run(client, folder.name, "go")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert [(c.call_id, c.tool, c.args) for c in calls] == [
            ("g", "demo__add", {"a": 20, "b": 22})
        ]
        await handle.signal("approve", {"call_id": "g", "by": "alice"})
        result = await result_of(handle)
    assert result.text == "sum 42"


async def test_http_server_with_a_header_secret_and_a_stdio_env_secret(
    client: Client, make_agent: Callable[..., Path], http_server: tuple[str, list[str]]
) -> None:
    url, seen = http_server
    token = secret(f"mcp-header-{uuid.uuid4().hex}")
    demo_token = secret(f"demo-env-{uuid.uuid4().hex}")
    folder = make_agent(
        env={"required": ["MCP_TOKEN", "DEMO_TOKEN"]},
        mcp_servers={
            "remote": {
                "url": url,
                "headers": {"Authorization": {"env": "MCP_TOKEN", "prefix": "Bearer "}},
                "tools": ["add"],
                "effects": "none",
            },
            "local": stdio(env=["DEMO_TOKEN"], tools=["token"]),
        },
        script=[
            {"tool_calls": [
                {"id": "r", "name": "remote__add", "args": {"a": 4, "b": 5}},
                {"id": "t", "name": "local__token"},
            ]},
            "done",
        ],
    )  # fmt: skip
    environ = {"MCP_TOKEN": token, "DEMO_TOKEN": demo_token}
    text, history, calls = await run(client, folder, environ)
    assert text == "done"
    assert calls["r"]["result"] == "9"
    assert f"Bearer {token}" in seen  # the server got the header
    assert calls["t"]["result"] == "token is [redacted]"  # the server got the env value
    raw = history.to_json()
    assert token not in raw and demo_token not in raw


async def test_a_server_down_at_start_joins_a_later_run(
    client: Client,
    make_agent: Callable[..., Path],
    agent_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toren.worker._mcp._pool import McpPool

    monkeypatch.setattr(McpPool, "refresh_every_s", 0.0)
    port = free_port()
    folder = make_agent(
        mcp_servers={"remote": {"url": f"http://127.0.0.1:{port}/mcp", "tools": ["add"]}},
        script=[
            {"tool_calls": [{"id": "r", "name": "remote__add", "args": {"a": 1, "b": 1}}]},
            "got {last_tool_result}",
        ],
    )  # fmt: skip
    async with serve(client, [folder], environ={}) as runtime:
        assert "remote__add" not in runtime.agents[agent_name].agent.tools  # down at start
        with serving_http(port):
            handle = await toren_client.start_run(client, folder.name, "go")
            result = await result_of(handle)
    assert result.text == "got 2"  # listed at the run's start, run by the dynamic activity
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    assert scheduled(history) == [f"{agent_name}.remote__add"]


def check(folder: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **environ},
    )


async def test_check_lists_reachable_servers_and_says_why_others_are_not(
    make_agent: Callable[..., Path], http_server: tuple[str, list[str]]
) -> None:
    url, _ = http_server
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    folder = make_agent(
        env={"required": ["MCP_TOKEN"]},
        mcp_servers={
            "local": stdio(tools={"add": {"effects": "none", "timeout_ms": 2000}, "fail": None}),
            "remote": {"url": url, "tools": ["add"], "max_attempts": 2,
                       "headers": {"Authorization": {"env": "MCP_TOKEN", "prefix": "Bearer "}}},
            "gone": {"url": closed},
            "broken": {"command": ["/nonexistent/mcp-server"]},
        },
    )  # fmt: skip
    out = await asyncio.to_thread(check, folder, MCP_TOKEN="t0ken-for-check")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"mcp server local (stdio: {sys.executable} {DEMO}): 2 tool(s)" in text
    assert (
        "tool local__add: effects=none idempotency=keyed approval=never timeout_ms=2000 "
        "max_attempts=" in text
    )
    assert "tool local__fail: effects=external" in text
    assert f"mcp server remote (http: {url}): 1 tool(s)" in text
    assert "max_attempts=2" in text.split("tool remote__add:")[1].splitlines()[0]
    assert f"! mcp server gone (http: {closed}): could not reach it: ConnectError" in text
    assert "! mcp server broken (stdio: /nonexistent/mcp-server): could not reach it: " in text
    assert "a worker would serve the agent without its tools" in text


@pytest.mark.parametrize(
    ("servers", "messages"),
    [
        (
            {"remote": {"url": "https://x.example/mcp", "headers": {"Authorization": "Bearer abc"}}},
            ["mcp_servers.remote.headers: Authorization: a literal value is not allowed here"],
        ),
        (
            {"remote": {"url": "https://x.example/mcp",
                        "headers": {"Authorization": {"env": "NOT_DECLARED"}}},
             "local": stdio(env=["ALSO_NOT"])},
            ["mcp_servers: remote: 'NOT_DECLARED' is not declared in agent.yaml `env`",
             "mcp_servers: local: 'ALSO_NOT' is not declared in agent.yaml `env`"],
        ),
        (
            {"local": stdio(comand=["x"], tools={"add": {"aproval": "always"}})},
            ["unknown key 'mcp_servers.local.comand'; did you mean 'command'?",
             "unknown key 'mcp_servers.local.tools.add.aproval'; did you mean 'approval'?"],
        ),
        (
            {"both": {"command": ["x"], "url": "http://x"}, "Bad__Name": {"url": "ftp://x"},
             "local": stdio(tools={"add": {"approval": "sometimes", "timeout_ms": 0}})},
            ["mcp_servers.both: give exactly one of command: (a stdio server) or url: (HTTP)",
             "mcp_servers: server name 'Bad__Name' must be snake_case without '__'",
             "mcp_servers.Bad__Name: url: 'ftp://x' must start with http:// or https://",
             "mcp_servers.local.tools.add.approval: must be 'never' or 'always', got 'sometimes'",
             "mcp_servers.local.tools.add.timeout_ms: must be greater than or equal to 1, got 0"],
        ),
    ],
)  # fmt: skip
def test_config_errors_name_the_key(
    make_agent: Callable[..., Path], servers: dict[str, Any], messages: list[str]
) -> None:
    folder = make_agent(env={"required": ["MCP_TOKEN"]}, mcp_servers=servers)
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert str(folder / "agent.yaml") in text
    for message in messages:
        assert message in text


def test_header_names_and_values_are_checked(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(
        env={"optional": {"MCP_TOKEN": ""}},
        mcp_servers={"remote": {"url": "https://x.example/mcp", "headers": {
            "Bad Header": {"env": "MCP_TOKEN"}, "X-Key": {"env": "MCP_TOKEN", "prefx": "a"}}}},
    )  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "mcp_servers.remote.headers: 'Bad Header' is not an HTTP header name" in text
    assert "unknown key 'mcp_servers.remote.headers.X-Key.prefx'" in text


async def test_an_mcp_tool_named_like_an_agent_tool_stops_the_worker(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    own = """
from toren import define_tool
tool = define_tool(description="A local tool with an MCP tool's name.", handler=lambda a, c: "own")
"""
    folder = make_agent(tools={"demo__add": own}, mcp_servers={"demo": stdio(tools=["add"])})
    with pytest.raises(ConfigError) as failed:
        async with serve(client, [folder]):
            pass
    text = str(failed.value)
    assert "mcp_servers.demo: MCP tool 'demo__add' has the name of" in text
    assert "demo__add.py" in text


async def test_a_server_listing_two_tools_of_one_name_stops_the_worker(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    """The worker kept the last one listed, silently; now it refuses to start, and `toren
    check` says why."""
    twins = {"command": [sys.executable, str(DEMO.with_name("twins.py"))]}
    first = make_agent(mcp_servers={"demo": twins})
    with pytest.raises(ConfigError) as failed:
        async with serve(client, [first]):
            pass
    assert (
        "mcp_servers.demo: MCP server 'demo' lists 2 tools named 'add': a call could reach "
        "either, so none is used; fix the server (each tool needs its own name)"
    ) in str(failed.value)
    # Allowed elsewhere: only the tools the agent uses count.
    other = make_agent(name=f"{first.name}_b", mcp_servers={"demo": {**twins, "tools": ["fail"]}})
    async with serve(client, [other]):
        pass
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", str(first)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "! MCP server 'demo' lists 2 tools named 'add'" in out.stdout, out.stdout + out.stderr


async def test_a_worker_that_fails_to_start_stops_the_servers_it_started(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    """`run_worker` refused the agent (two tools of one name) after starting its MCP server:
    the server process was left running; now everything opened is closed on the way out."""
    from toren.worker import run_worker

    starts = tmp_path / "starts"
    twins = {"command": [sys.executable, str(DEMO.with_name("twins.py"))], "env": ["DEMO_STARTS"]}
    folder = make_agent(env={"optional": {"DEMO_STARTS": str(starts)}}, mcp_servers={"demo": twins})
    with pytest.raises(ConfigError, match="lists 2 tools named 'add'"):
        await run_worker([folder], client=client)
    assert len(starts.read_text().split()) == 1  # it did start
    # The pid it wrote is its own namespace's (it runs in bubblewrap): look for any process
    # still running with the environment it was given.
    with pytest.raises(AssertionError, match="no process runs with"):
        kill_given(f"DEMO_STARTS={starts}")
