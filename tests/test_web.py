"""The HTTP API (`toren serve`) against a real dev server and real workers.

JSON endpoints are driven in-process through `httpx.ASGITransport`; the SSE stream and the
schemathesis run go through uvicorn on a free port, as a browser or `curl` would.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.conftest import DevServer, result_of, wait_for
from toren import client as toren_client
from toren.errors import UsageError
from toren.testing import free_port
from toren.web import Token, create_app, parse_tokens, serve
from toren.worker import serve as serve_agents

GATED = """
from toren import define_tool
tool = define_tool(
    description="Needs a person.",
    input={"type": "object", "properties": {"n": {"type": "integer"}}},
    approval="always",
    handler=lambda a, c: "ran",
)
"""
ADMIN = "admin-token-1"
"""A token for every agent."""
AGENT_KEY = SearchAttributeKey.for_keyword("TorenAgent")
OTHER = "other-token-2"
"""A token for an agent no test uses, so every real run is refused to it."""


def api(app: Any, token: str | None = ADMIN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://toren", headers=headers
    )


def make_app(client: Client, agent: str) -> Any:
    return create_app(
        client,
        tokens=[
            Token(ADMIN),
            Token(f"{agent}-only", frozenset({agent})),
            Token(OTHER, frozenset({"someone_else"})),
        ],
    )


async def test_an_approval_decided_over_http_completes_the_run(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {"n": 1}}]}, "all done"],
    )
    agent = folder.name
    app = make_app(client, agent)
    async with serve_agents(client, [folder]), api(app, f"{agent}-only") as http:
        started = await http.post("/v1/runs", json={"agent": agent, "prompt": "refund A-1"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        assert started.json()["agent"] == agent

        async def waiting() -> list[dict[str, Any]]:
            r = await http.get(f"/v1/runs/{run_id}/pending")
            assert r.status_code == 200, r.text
            return list(r.json()["pending"])

        [call] = await wait_for(waiting, timeout=30)
        assert call["call_id"] == "g1" and call["tool"] == "gated" and call["args"] == {"n": 1}

        async def in_inbox() -> list[dict[str, Any]]:
            r = await http.get("/v1/inbox")
            return [i for i in r.json()["inbox"] if i["run_id"] == run_id]

        [item] = await wait_for(in_inbox, timeout=30)
        assert item["agent"] == agent and item["call"]["call_id"] == "g1"
        # A token of another agent sees neither the run nor its waiting call.
        async with api(app, OTHER) as other:
            assert (await other.get(f"/v1/runs/{run_id}/pending")).status_code == 403
            refused = await other.post(
                f"/v1/runs/{run_id}/decisions", json={"call_id": "g1", "approve": True}
            )
            assert refused.status_code == 403
            assert refused.json()["field"] == "id"
            assert (await other.get("/v1/inbox")).json() == {"inbox": [], "questions": []}
            assert (await other.get(f"/v1/inbox?agent={agent}")).status_code == 403

        decided = await http.post(
            f"/v1/runs/{run_id}/decisions",
            json={"call_id": "g1", "approve": True, "by": "alice", "comment": "ok"},
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["approved"] is True and decided.json()["by"] == "alice"
        assert decided.json()["via"] == "update"
        again = await http.post(
            f"/v1/runs/{run_id}/decisions", json={"call_id": "g1", "approve": False}
        )
        # Decided already; or, when the run finished in between, closed: a conflict either way.
        assert again.status_code == 409, again.text
        assert "g1" in again.json()["error"] or "has closed" in again.json()["error"]

        async def finished() -> dict[str, Any] | None:
            r = await http.get(f"/v1/runs/{run_id}")
            return r.json() if r.json()["status"] == "completed" else None

        status = await wait_for(finished, timeout=30)
        late = await http.post(
            f"/v1/runs/{run_id}/decisions", json={"call_id": "g1", "approve": True}
        )
        assert late.status_code == 409 and "closed" in late.json()["error"]
        assert status["result"]["text"] == "all done"
        assert status["agent"] == agent and status["workflow_type"] == "AgentRun"
        log = (await http.get(f"/v1/runs/{run_id}/events")).json()["events"]
        types = [e["type"] for e in log]
        assert types[0] == "RunStarted" and types[-1] == "RunCompleted"
        resolved = [e for e in log if e["type"] == "ApprovalResolved"]
        assert resolved and resolved[0]["by"] == "alice"


async def test_threads_answer_queue_and_list_messages(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(script=["first answer", "second answer", "third answer"])
    agent = folder.name
    app = make_app(client, agent)
    async with serve_agents(client, [folder]), api(app) as http:
        r = await http.post("/v1/threads", json={"agent": agent, "user_id": "alice"})
        assert r.status_code == 201, r.text
        thread_id = r.json()["thread_id"]
        answer = await http.post(f"/v1/threads/{thread_id}/messages", json={"content": "hi"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["text"] == "first answer"
        assert answer.json()["status"] == "completed"
        queued = await http.post(
            f"/v1/threads/{thread_id}/messages",
            json={"content": "later", "wait": False, "message_id": "m-2"},
        )
        assert queued.status_code == 202
        assert queued.json() == {"message_id": "m-2", "status": "queued"}

        async def four() -> list[dict[str, Any]]:
            r = await http.get(f"/v1/threads/{thread_id}/messages")
            found = list(r.json()["messages"])
            return found if len(found) == 4 else []

        conversation = await wait_for(four, timeout=30)
        assert [m["role"] for m in conversation] == ["user", "assistant", "user", "assistant"]
        assert conversation[2]["content"] == "later"
        page = await http.get(f"/v1/threads/{thread_id}/messages?start=1&limit=2")
        assert [m["role"] for m in page.json()["messages"]] == ["assistant", "user"]
        status = await http.get(f"/v1/threads/{thread_id}")
        assert status.json()["workflow_type"] == "AgentThread"
        assert status.json()["status"] == "running"
        # A run is no thread: its messages are not served as a thread's.
        run = await http.post("/v1/runs", json={"agent": agent, "prompt": "x"})
        not_thread = await http.get(f"/v1/threads/{run.json()['run_id']}/messages")
        assert not_thread.status_code == 404
        for path in ("", "/pending", "/events"):
            r = await http.get(f"/v1/threads/{run.json()['run_id']}{path}")
            assert r.status_code == 404 and "not a toren thread" in r.json()["error"]
        # Under /v1/runs a thread's id works: it runs executions like a run.
        assert (await http.get(f"/v1/runs/{thread_id}/pending")).json() == {"pending": []}


async def test_requests_without_a_good_token_or_body_get_a_4xx_naming_why(
    client: Client, agent_name: str
) -> None:
    app = make_app(client, agent_name)
    async with api(app, token=None) as anonymous:
        r = await anonymous.post("/v1/runs", json={"agent": agent_name, "prompt": "x"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer" in r.json()["error"]
        assert (await anonymous.get("/v1/openapi.json")).status_code == 200
    async with api(app, token="not-a-token") as wrong:
        assert (await wrong.get("/v1/inbox")).status_code == 401
    async with api(app, token=OTHER) as other:
        r = await other.post("/v1/runs", json={"agent": agent_name, "prompt": "x"})
        assert r.status_code == 403 and r.json()["field"] == "agent"
        r = await other.post("/v1/threads", json={"agent": agent_name})
        assert r.status_code == 403
    async with api(app) as http:
        cases: list[tuple[dict[str, Any] | str, str]] = [
            ({"prompt": "x"}, "agent"),
            ({"agent": "Not An Agent", "prompt": "x"}, "agent"),
            ({"agent": agent_name, "prompt": ""}, "prompt"),
            ({"agent": agent_name, "prompt": "x", "promt": "typo"}, "promt"),
            ({"agent": agent_name, "prompt": "x", "run_id": "no spaces please"}, "run_id"),
            ({"agent": agent_name, "prompt": "x", "attachments": "a1"}, "attachments"),
        ]
        for payload, field in cases:
            r = await http.post("/v1/runs", json=payload)
            assert r.status_code == 422, (payload, r.text)
            assert r.json()["field"] == field, (payload, r.json())
            assert field in r.json()["error"]
        r = await http.post("/v1/runs", content=b"{not json")
        assert r.status_code == 400 and "JSON" in r.json()["error"]
        r = await http.post("/v1/runs", content=b"[1, 2]")
        assert r.status_code == 400
        r = await http.post("/v1/runs", content=b'{"agent": "a", "prompt": "\\ud800"}')
        assert r.status_code == 400
        missing = f"nope-{uuid.uuid4().hex[:8]}"
        for path in ("", "/pending", "/events"):
            r = await http.get(f"/v1/runs/{missing}{path}")
            assert r.status_code == 404 and r.json()["field"] == "id", r.text
        r = await http.post(
            f"/v1/runs/{missing}/decisions", json={"call_id": "c", "approve": "maybe"}
        )
        assert r.status_code == 422 and r.json()["field"] == "approve"
        r = await http.get(f"/v1/runs/{missing}/stream", headers={"Last-Event-ID": "-3"})
        assert r.status_code == 400 and r.json()["field"] == "Last-Event-ID"
        r = await http.get("/v1/inbox?agent=Bad-Name")
        assert r.status_code == 400 and r.json()["field"] == "agent"
        first = await http.post("/v1/runs", json={"agent": agent_name, "prompt": "x"})
        run_id = first.json()["run_id"]
        twice = await http.post(
            "/v1/runs", json={"agent": agent_name, "prompt": "x", "run_id": run_id}
        )
        assert twice.status_code == 409 and twice.json()["field"] == "id"
        await client.get_workflow_handle(run_id).terminate("test over")


def test_tokens_from_the_environment() -> None:
    tokens = parse_tokens(" a1 , b2:support|billing ,")
    assert [t.secret for t in tokens] == ["a1", "b2"]
    assert tokens[0].agents is None and tokens[1].agents == {"support", "billing"}
    assert "b2" not in repr(tokens)  # a token never reaches a log line through repr
    with pytest.raises(UsageError, match="entry 2") as err:
        parse_tokens("good,s3cret:Bad-Agent")
    assert "s3cret" not in str(err.value)
    assert parse_tokens(None) == [] == parse_tokens("")


async def test_serve_refuses_to_run_open_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOREN_WEB_TOKENS", raising=False)
    with pytest.raises(UsageError, match="--insecure-no-auth"):
        await serve("0.0.0.0", free_port())


def test_toren_serve_beyond_loopback_needs_tokens_or_the_insecure_flag() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOREN_WEB_TOKENS"}
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True, text=True, timeout=60, env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "TOREN_WEB_TOKENS" in out.stderr and "--insecure-no-auth" in out.stderr


@pytest.mark.parametrize(
    ("args", "warning"),
    [((), "every request on 127.0.0.1"), (("--host", "0.0.0.0", "--insecure-no-auth"), "0.0.0.0")],
)
def test_toren_serve_runs_open_on_loopback_or_when_told_with_a_warning(
    dev_server: DevServer, args: tuple[str, ...], warning: str
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TOREN_WEB_TOKENS"}
    env["TEMPORAL_ADDRESS"] = dev_server.address
    server = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    try:
        for _ in range(200):
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/inbox?agent=t_nobody", timeout=10)
                break
            except httpx.TransportError:
                threading.Event().wait(0.1)
        assert r.status_code == 200 and r.json() == {"inbox": [], "questions": []}
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    assert "no TOREN_WEB_TOKENS" in out and warning in out, out


async def test_hostile_bodies_and_query_values_get_a_4xx_naming_the_field(
    client: Client, agent_name: str
) -> None:
    app = make_app(client, agent_name)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # a 500 is an answer
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    missing = f"nope-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as http:
        nested = b"[" * 1000 + b"]" * 1000
        for path, payload, field in (
            ("/v1/runs", nested, "body"),
            (f"/v1/runs/{missing}/decisions", b'{"call_id": "c", "approve": ' + nested + b"}", "body"),
            # Deep enough that a worker could never decode the run's input: refused before a start.
            ("/v1/runs", b'{"agent": "%s", "prompt": "p", "arguments": {"a": %s}}'
             % (agent_name.encode(), b"[" * 150 + b"]" * 150), "arguments"),
        ):  # fmt: skip
            r = await http.post(path, content=payload)
            assert r.status_code == 400, (path, r.status_code, r.text[:200])
            assert r.json()["field"] == field, r.text
        for path, field in (
            (f"/v1/runs/{missing}/stream?from=\u00b2", "from"),
            (f"/v1/threads/{missing}/messages?limit=\u00b2", "limit"),
            (f"/v1/threads/{missing}/messages?limit=\u0663", "limit"),  # an Arabic-Indic 3
            (f"/v1/threads/{missing}/messages?start=-1", "start"),
        ):
            r = await http.get(path)
            assert r.status_code == 400, (path, r.status_code, r.text[:200])
            assert r.json()["field"] == field, r.text
        r = await http.get(
            f"/v1/runs/{missing}/stream", headers={"Last-Event-ID": "\u00b2".encode()}
        )
        assert r.status_code == 400 and r.json()["field"] == "Last-Event-ID", r.text
        # A valid Last-Event-ID wins over `from`, but a bad `from` beside it is still refused
        # (schemathesis found `?from=-2625` answered 200).
        r = await http.get(f"/v1/runs/{missing}/stream?from=-2", headers={"Last-Event-ID": "3"})
        assert r.status_code == 400 and r.json()["field"] == "from", r.text

        sent = 0

        async def gibibyte() -> AsyncIterator[bytes]:
            nonlocal sent
            chunk = b" " * 1_048_576
            for _ in range(1024):
                sent += len(chunk)
                yield chunk

        # Chunked (no Content-Length): the server stops reading at its limit.
        r = await http.post("/v1/runs", content=gibibyte())
        assert r.status_code == 413 and r.json()["field"] == "body", r.text
        assert sent < 64 * 1_048_576, sent
    # No run was started by any of it.
    listed = [w async for w in client.list_workflows(f'TaskQueue = "{agent_name}"')]
    assert listed == []


async def test_a_search_attribute_set_at_start_does_not_decide_who_sees_a_run(
    client: Client, agent_name: str
) -> None:
    app = make_app(client, agent_name)
    forged = TypedSearchAttributes([SearchAttributePair(AGENT_KEY, "someone_else")])
    # A run of `agent_name` whose starter named another agent; no worker, so no task overwrites it.
    handle = await client.start_workflow(
        "AgentRun",
        {"agent": agent_name, "prompt": "x"},
        id=f"forged-{uuid.uuid4().hex[:8]}",
        task_queue=agent_name,
        search_attributes=forged,
    )
    try:
        async with api(app, OTHER) as other:
            for path in ("", "/pending", "/events"):
                r = await other.get(f"/v1/runs/{handle.id}{path}")
                assert r.status_code == 403, (path, r.status_code, r.text)
        async with api(app, f"{agent_name}-only") as own:
            r = await own.get(f"/v1/runs/{handle.id}")
            assert r.status_code == 200 and r.json()["agent"] == agent_name, r.text
    finally:
        await handle.terminate("test over")


def test_serve_without_the_web_extra_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "from toren.cli import main\n"
        "sys.exit(main(['serve']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "pip install 'toren[web]'" in out.stderr
    # toren itself works without the extra.
    out = subprocess.run(
        [sys.executable, "-c", code.replace("main(['serve'])", "main(['check', '--help'])")],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert "usage: toren check" in out.stdout


# -- the stream ------------------------------------------------------------------------------


@workflow.defn(name="AgentRun")
class StreamingRun:
    """Stands in for an `AgentRun` that hosts the stream: a few items with pauses, then done."""

    @workflow.init
    def __init__(self, request: dict[str, Any]) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        toren = self.stream.topic("toren")
        noise = self.stream.topic("other")
        run_id = workflow.info().workflow_id
        for step in range(1, 7):
            toren.publish({"type": "step", "run_id": run_id, "step": step, "text": f"s\n{step}"})
            noise.publish({"type": "not for the web"})
            await workflow.sleep(0.4)
        toren.publish({"type": "run_completed", "run_id": run_id, "step": 7})
        await workflow.sleep(0.5)
        self.stream.detach_pollers()  # see StreamingThread
        await workflow.wait_condition(workflow.all_handlers_finished)
        return {"text": "done"}


@workflow.defn(name="AgentThread")
class StreamingThread:
    """Stands in for an `AgentThread`: two executions, each ending with `run_completed`."""

    @workflow.init
    def __init__(self, request: dict[str, Any]) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        toren = self.stream.topic("toren")
        for execution in (1, 2):
            toren.publish({"type": "step", "step": 1, "execution": execution})
            await workflow.sleep(0.3)
            toren.publish({"type": "run_completed", "step": 2, "execution": execution})
            await workflow.sleep(0.3)
        # Release the subscribers' long polls before closing, as a workflow hosting a stream
        # must (an update still running at the end is an error under pytest's warnings).
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return {"closed": True}


def sse(lines: list[str]) -> list[dict[str, Any]]:
    """Events of an SSE text: `{"id": int, "data": {...}}` each (comments and `retry` skipped)."""
    events, current = [], {}
    for line in lines:
        if not line:
            if "data" in current:
                events.append(current)
            current = {}
        elif line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
    return events


@pytest.fixture
async def web_server(client: Client, agent_name: str) -> AsyncIterator[str]:
    """The app under uvicorn on a free port, in this event loop."""
    port = free_port()
    config = uvicorn.Config(
        make_app(client, agent_name), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, timeout=10)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


async def test_sse_reconnecting_with_last_event_id_misses_nothing_and_repeats_nothing(
    client: Client, agent_name: str, web_server: str
) -> None:
    queue = f"stream-{uuid.uuid4().hex[:8]}"
    run_id = f"{agent_name}-stream"
    # A client without toren's plugin: the plugin would add the real `AgentRun` to the worker.
    plain = await Client.connect(client.service_client.config.target_host)
    async with (
        Worker(
            plain,
            task_queue=queue,
            workflows=[StreamingRun, StreamingThread],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ),
        httpx.AsyncClient(
            base_url=web_server,
            headers={"Authorization": f"Bearer {agent_name}-only"},
            timeout=30,
        ) as http,
    ):
        handle = await client.start_workflow(
            "AgentRun", {"agent": agent_name}, id=run_id, task_queue=queue
        )
        url = f"/v1/runs/{run_id}/stream"
        received: list[dict[str, Any]] = []
        connections = 0
        last: str | None = None
        while not received or received[-1]["data"]["type"] != "run_completed":
            connections += 1
            assert connections < 20
            headers = {"Last-Event-ID": last} if last is not None else {}
            async with http.stream("GET", url, headers=headers) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                lines: list[str] = []
                async for line in r.aiter_lines():
                    lines.append(line)
                    got = sse(lines + [""])
                    # Leave after two events: the client drops mid-run.
                    if len(got) == 2 and got[-1]["data"]["type"] != "run_completed":
                        break
                got = sse(lines + [""])
            received += got
            if got:
                last = str(got[-1]["id"])
        assert connections >= 3
        steps = [e["data"]["step"] for e in received]
        assert steps == [1, 2, 3, 4, 5, 6, 7], received
        assert [e["data"]["text"] for e in received[:2]] == ["s\n1", "s\n2"]
        ids = [e["id"] for e in received]
        assert ids == sorted(set(ids))  # each offset once, in order
        assert all(e["data"]["run_id"] == run_id for e in received)
        assert await result_of(handle) == {"text": "done"}

        # After the run: `?from=` replays from an offset; Last-Event-ID wins over it.
        r = await http.get(f"{url}?from={ids[3]}")
        assert [e["data"]["step"] for e in sse(r.text.splitlines())] == [4, 5, 6, 7]
        r = await http.get(f"{url}?from=0", headers={"Last-Event-ID": str(ids[5])})
        assert [e["data"]["step"] for e in sse(r.text.splitlines())] == [7]
        async with httpx.AsyncClient(
            base_url=web_server, headers={"Authorization": f"Bearer {OTHER}"}
        ) as other:
            assert (await other.get(url)).status_code == 403

        # A thread's stream goes on past each execution's run_completed, until the thread ends.
        thread = await client.start_workflow(
            "AgentThread", {"agent": agent_name}, id=f"{agent_name}-thread", task_queue=queue
        )
        r = await http.get(f"/v1/threads/{thread.id}/stream")
        got = [(e["data"]["execution"], e["data"]["type"]) for e in sse(r.text.splitlines())]
        assert got == [(1, "step"), (1, "run_completed"), (2, "step"), (2, "run_completed")]
        assert await result_of(thread) == {"closed": True}


async def test_a_finished_runs_stream_is_served_whole(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # Every AgentRun hosts a stream now: a finished one is read back to its run_completed.
    folder = make_agent(script=["done"])
    app = make_app(client, folder.name)
    async with serve_agents(client, [folder]), api(app) as http:
        run = await http.post("/v1/runs", json={"agent": folder.name, "prompt": "x"})
        run_id = run.json()["run_id"]
        await result_of(client.get_workflow_handle(run_id))
        r = await http.get(f"/v1/runs/{run_id}/stream")
        assert r.status_code == 200
        items = sse(r.text.splitlines())
        assert items and items[-1]["data"]["type"] == "run_completed"


# -- the schema ------------------------------------------------------------------------------


async def test_generated_requests_get_no_5xx_and_conforming_answers(
    client: Client,
    make_agent: Callable[..., Path],
    agent_name: str,
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A run parked on an approval and a live thread, so generated requests reach real ones too.
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {"n": 1}}]}, "done"],
    )
    chat = make_agent(script=["ok"], name=f"{agent_name}_chat")
    token = Token("schema-token", frozenset({agent_name, chat.name}))
    # As `toren serve` does: the app connects from Temporal's environment on first use.
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(tokens=[token]), host="127.0.0.1", port=port, log_level="warning")
    )
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer schema-token"}
    async with serve_agents(client, [folder, chat]):
        task = asyncio.create_task(server.serve())
        try:
            await wait_for(lambda: server.started, timeout=10)
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60) as http:
                run = await http.post("/v1/runs", json={"agent": agent_name, "prompt": "go"})
                thread = await http.post("/v1/threads", json={"agent": chat.name})
                done = await http.post("/v1/runs", json={"agent": chat.name, "prompt": "hi"})
                run_id, thread_id = run.json()["run_id"], thread.json()["thread_id"]
                await result_of(client.get_workflow_handle(done.json()["run_id"]))

                async def parked() -> Any:
                    return (await http.get(f"/v1/runs/{run_id}/pending")).json().get("pending")

                await wait_for(parked, timeout=30)
            # schemathesis calls block: off the loop that serves them.
            starts = {"/v1/runs": agent_name, "/v1/threads": chat.name}
            ids = {"run": run_id, "thread": thread_id, "done": done.json()["run_id"]}
            await asyncio.to_thread(_schemathesis, base, auth, starts, ids)
        finally:
            server.should_exit = True
            await task
            for queue in (agent_name, chat.name):
                query = f'TaskQueue = "{queue}" AND ExecutionStatus = "Running"'
                async for execution in client.list_workflows(query):
                    await client.get_workflow_handle(execution.id).terminate("test over")


def _of_agent(agent: str, case: Any) -> Any:
    """`case`, starting a run or thread of `agent`, with an id nothing else generates."""
    if isinstance(case.body, dict) and "agent" in case.body:
        case.body["agent"] = agent
        # A generated id ("0") would be a live run for every later generated `/stream` of it.
        case.body.pop("run_id", None)
        case.body.pop("thread_id", None)
    return case


def _without_page(case: Any) -> Any:
    if isinstance(case.query, dict):
        case.query.pop("next", None)
    return case


def _schemathesis(
    base: str, auth: dict[str, str], starts: dict[str, str], ids: dict[str, str]
) -> None:
    """Every operation, valid and invalid data, on unknown ids and on real runs and a thread."""
    schema = schemathesis.openapi.from_url(f"{base}/v1/openapi.json")
    # The token goes in below on every request; a missing token's 401 is tested above.
    schema.config.generation.update(with_security_parameters=False)
    schema.config.checks.negative_data_rejection.expected_statuses.append("413")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 21  # every route of the app
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        for operation in operations:
            strategy = operation.as_strategy(generation_mode=mode)
            path = operation.path
            if path == "/v1/inbox/stream":
                continue  # never ends, and takes no input: tests/test_web_console_api.py
            if path in ("/v1/me", "/v1/agents") and mode == schemathesis.GenerationMode.NEGATIVE:
                continue  # no input to get wrong
            # A live stream never ends: streams of a finished run only.
            real = ids["thread"] if path.startswith("/v1/threads") else ids["run"]
            if path.endswith("/stream"):
                real = "" if path.startswith("/v1/threads") else ids["done"]
            if "{id}" in path and real:
                strategy |= operation.as_strategy(
                    generation_mode=mode, path_parameters={"id": real}
                )
            if path in starts and mode == schemathesis.GenerationMode.POSITIVE:  # own agents
                strategy |= strategy.map(functools.partial(_of_agent, starts[path]))
            positive = mode == schemathesis.GenerationMode.POSITIVE
            if operation.method.upper() == "GET" and path == "/v1/runs" and positive:
                # A page token is one a page gave (an invented one is a 400 naming `next`).
                strategy = strategy.map(_without_page)

            # CI runs one fixed set of examples (a landing must not hang on a draw); a developer's
            # run draws new ones each time, and a failure prints the seed that repeats it.
            @given(case=strategy)
            @settings(
                max_examples=20,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=os.environ.get("CI") == "true",
            )
            def check(case: Any) -> None:
                case.call_and_validate(headers=auth, timeout=60)

            check()


async def test_a_decision_racing_the_runs_end_is_a_conflict_not_an_unknown_run(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    """Seen in CI: the run answered right after an approval and completed between the route's
    status check and the update; Temporal's NOT_FOUND for that ("workflow execution already
    completed", or "workflow update was aborted by closing workflow") became a 404."""
    from toren.web._errors import WebError
    from toren.web._routes import _closing_under

    folder = make_agent(script=["done"])
    async with serve_agents(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "hi")
        await handle.result()
    with pytest.raises(WebError) as err:
        async with _closing_under(client, handle.id, "no call waits any more"):
            await toren_client.decide(client, handle.id, "g1", True, by="alice")
    assert err.value.status == 409 and "has closed" in str(err.value)
    # A run that does not exist stays Temporal's NOT_FOUND (the API's 404).
    with pytest.raises(RPCError) as missing:
        async with _closing_under(client, "no-such-run-x", "no call waits any more"):
            await toren_client.decide(client, "no-such-run-x", "g1", True, by="alice")
    assert missing.value.status == RPCStatusCode.NOT_FOUND
