"""The console's endpoints (`/v1/me`, `/v1/agents`, `GET /v1/runs`, `/v1/inbox/stream`).

Against a real dev server and real workers: JSON through `httpx.ASGITransport`, the inbox's
Server-Sent Events through uvicorn on a free port, as a browser's `fetch()` reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from temporalio.client import Client

from tests.conftest import result_of, wait_for
from toren import client as toren_client
from toren.testing import free_port
from toren.web import Token, create_app
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
PARK = [{"tool_calls": [{"id": "g1", "name": "gated", "args": {"n": 1}}]}, "all done"]
ADMIN = "admin-token-1"


def api(app: Any, token: str | None = ADMIN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://toren", headers=headers
    )


def make_app(client: Client | None, *agents: str) -> Starlette:
    """ADMIN sees every agent; `<agent>-only` sees that agent's runs alone."""
    tokens = [Token(ADMIN, name="admin")]
    tokens += [Token(f"{a}-only", frozenset({a})) for a in agents]
    return create_app(client, tokens=tokens)


async def test_me_says_who_the_token_is_and_what_it_may_touch() -> None:
    tokens = [
        Token("t-named", frozenset({"support", "billing"}), name="alice"),
        Token("t-unnamed"),
        Token("t-scoped", frozenset({"support"})),
    ]
    app = create_app(tokens=tokens)  # /v1/me asks Temporal nothing: no client needed
    expected = {
        "t-named": {"identity": "alice", "agents": ["billing", "support"], "open": False},
        "t-unnamed": {"identity": None, "agents": None, "open": False},
        "t-scoped": {"identity": None, "agents": ["support"], "open": False},
    }
    for token, body in expected.items():
        async with api(app, token) as http:
            r = await http.get("/v1/me")
            assert r.status_code == 200 and r.json() == body, (token, r.text)
    async with api(app, None) as anonymous:
        assert (await anonymous.get("/v1/me")).status_code == 401
    async with api(create_app(tokens=[]), None) as open_server:
        r = await open_server.get("/v1/me")
        assert r.json() == {"identity": None, "agents": None, "open": True}


async def test_runs_are_listed_filtered_paged_and_scoped(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    gated = make_agent(tools={"gated": GATED}, script=PARK)
    other = make_agent(script=["ok"], name=f"{agent_name}_b")
    a, b = gated.name, other.name
    app = make_app(client, a, b)
    async with serve_agents(client, [gated, other]), api(app) as http:
        parked = await toren_client.start_run(client, a, "refund order A-1\nmore detail")
        finished = await toren_client.start_run(client, b, "say ok")
        await result_of(finished)
        thread = await toren_client.start_thread(client, b)

        async def listed(query: str, count: int) -> list[dict[str, Any]]:
            r = await http.get(f"/v1/runs?{query}")
            assert r.status_code == 200, r.text
            runs = list(r.json()["runs"])
            return runs if len(runs) == count else []

        [row] = await wait_for(lambda: listed(f"agent={a}&status=waiting", 1), timeout=30)
        assert row["run_id"] == parked.id and row["agent"] == a
        assert row["workflow_type"] == "AgentRun" and row["status"] == "waiting"
        assert row["waiting"] == 1 and row["closed_at"] is None and row["started_at"]
        assert row["prompt"] == "refund order A-1"  # the first line, from start_run's memo
        [row] = await wait_for(lambda: listed(f"agent={b}&type=run", 1), timeout=30)
        assert row["prompt"] == "say ok"
        assert row["run_id"] == finished.id and row["status"] == "completed"
        assert row["waiting"] == 0 and row["closed_at"] >= row["started_at"]
        [row] = await wait_for(lambda: listed(f"agent={b}&type=thread&status=running", 1))
        assert row["run_id"] == thread.id and row["workflow_type"] == "AgentThread"
        assert await listed(f"agent={a}&status=completed", 0) == []
        assert await listed(f"agent={b}&status=waiting", 0) == []
        # Newest first, a page at a time, until `next` is null.
        pages, seen, after = 0, [], ""
        while True:
            r = await http.get(f"/v1/runs?agent={b}&limit=1{after}")
            assert r.status_code == 200, r.text
            seen += [row["run_id"] for row in r.json()["runs"]]
            pages += 1
            assert pages < 5
            if r.json()["next"] is None:
                break
            after = f"&next={r.json()['next']}"
        assert seen == [thread.id, finished.id]
        everyone = {row["agent"] for row in (await http.get("/v1/runs?limit=100")).json()["runs"]}
        assert {a, b} <= everyone

        # A scoped token sees its agent's runs, whatever it asks for.
        async with api(app, f"{a}-only") as own:
            for query in ("", "type=thread", f"agent={a}", "status=completed", "limit=100"):
                r = await own.get(f"/v1/runs?{query}")
                assert r.status_code == 200, r.text
                assert {row["agent"] for row in r.json()["runs"]} <= {a}, (query, r.text)
            assert [row["run_id"] for row in (await own.get("/v1/runs")).json()["runs"]] == [
                parked.id
            ]
            refused = await own.get(f"/v1/runs?agent={b}")
            assert refused.status_code == 403 and refused.json()["field"] == "agent"

        bad = {
            "agent=Bad-Name": "agent",
            "agent=a'%20OR%20'1'='1": "agent",
            "status=done": "status",
            "type=workflow": "type",
            "limit=0": "limit",
            "limit=101": "limit",
            "limit=ten": "limit",
            "limit=\u00b2": "limit",  # a superscript 2: digits 0-9 only
            "limit=\u0663": "limit",  # an Arabic-Indic 3
            "next=not%20a%20token": "next",
            "next=AAAA": "next",  # base64, but no page token of Temporal's
        }
        for query, field in bad.items():
            r = await http.get(f"/v1/runs?{query}")
            assert r.status_code == 400, (query, r.text)
            assert r.json()["field"] == field and field in r.json()["error"], (query, r.text)

        # The agents: a scoped token's own; every recent run's for an unscoped one.
        agents = (await http.get("/v1/agents")).json()["agents"]
        assert {a, b} <= set(agents) and agents == sorted(agents)
        async with api(app, f"{b}-only") as own:
            assert (await own.get("/v1/agents")).json() == {"agents": [b]}
        for handle in (parked, thread):
            await handle.terminate("test over")


class Listener:
    """One client of `/v1/inbox/stream`: the events it got, read in the background."""

    def __init__(self, base: str, token: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        self.events: list[dict[str, Any]] = []
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async with self.http.stream("GET", "/v1/inbox/stream") as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))

    def calls(self) -> list[tuple[str, str, str]]:
        """The waiting calls of its latest event: (run_id, agent, call_id) each."""
        last = self.events[-1]["inbox"] if self.events else []
        return [(i["run_id"], i["agent"], i["call"]["call_id"]) for i in last]

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        await self.http.aclose()


@pytest.fixture
async def served() -> AsyncIterator[Callable[[Starlette], Any]]:
    """`await served(app)`: the app under uvicorn on a free port, stopped after the test."""
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def serve(app: Starlette) -> str:
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        servers.append((server, asyncio.create_task(server.serve())))
        await wait_for(lambda: server.started, timeout=10)
        return f"http://127.0.0.1:{port}"

    yield serve
    for server, task in servers:
        server.should_exit = True
        await task


async def test_the_inbox_stream_follows_parked_runs_for_each_tokens_agents(
    client: Client,
    make_agent: Callable[..., Path],
    agent_name: str,
    served: Callable[[Starlette], Any],
) -> None:
    first = make_agent(tools={"gated": GATED}, script=PARK)
    second = make_agent(tools={"gated": GATED}, script=PARK, name=f"{agent_name}_b")
    a, b = first.name, second.name
    app = make_app(client, a, b)
    base = await served(app)
    listeners: list[Listener] = []
    async with serve_agents(client, [first, second]), api(app) as http:
        runs = {}
        for agent in (a, b):
            r = await http.post("/v1/runs", json={"agent": agent, "prompt": "go"})
            runs[agent] = r.json()["run_id"]

        async def parked() -> bool:
            r = await http.get("/v1/inbox")
            return {i["run_id"] for i in r.json()["inbox"]} >= set(runs.values())

        await wait_for(parked, timeout=30)
        try:
            own_a, own_b = Listener(base, f"{a}-only"), Listener(base, f"{b}-only")
            listeners += [own_a, own_b]
            # At once on connect: what waits now, each its own agent's only.
            await wait_for(lambda: own_a.events and own_b.events, timeout=30)
            assert own_a.calls() == [(runs[a], a, "g1")]
            assert own_b.calls() == [(runs[b], b, "g1")]
            # A new parked run arrives without the client asking again.
            r = await http.post("/v1/runs", json={"agent": a, "prompt": "again"})
            later = r.json()["run_id"]
            await wait_for(lambda: len(own_a.calls()) == 2, timeout=30)
            assert {c[0] for c in own_a.calls()} == {runs[a], later}
            # A decision takes it away.
            decided = await http.post(
                f"/v1/runs/{runs[a]}/decisions", json={"call_id": "g1", "approve": True}
            )
            assert decided.status_code == 200, decided.text
            await wait_for(lambda: own_a.calls() == [(later, a, "g1")], timeout=30)
            assert await result_of(client.get_workflow_handle(runs[a])) is not None
            # Nothing of the other agent ever reached either.
            for listener, agent in ((own_a, a), (own_b, b)):
                agents = {i["agent"] for e in listener.events for i in e["inbox"]}
                assert agents == {agent}, listener.events
            assert all(e["questions"] == [] for e in own_a.events + own_b.events)
        finally:
            for listener in listeners:
                await listener.close()
            for run_id in (*runs.values(), later):
                with contextlib.suppress(Exception):
                    await client.get_workflow_handle(run_id).terminate("test over")


async def test_many_inbox_clients_cost_one_watcher(
    client: Client,
    make_agent: Callable[..., Path],
    served: Callable[[Starlette], Any],
) -> None:
    gated = make_agent(tools={"gated": GATED}, script=PARK)
    agent = gated.name
    app = make_app(client, agent)
    watcher = app.state.inbox_watcher
    watcher.every_s = 3600.0  # no second read on its own: each read the test sees, a client caused
    base = await served(app)
    async with serve_agents(client, [gated]), api(app) as http:
        run_id = (await http.post("/v1/runs", json={"agent": agent, "prompt": "go"})).json()[
            "run_id"
        ]

        async def parked() -> bool:
            r = await http.get("/v1/inbox")
            return run_id in {i["run_id"] for i in r.json()["inbox"]}

        await wait_for(parked, timeout=30)
        assert not watcher.running and watcher.reads == 0  # nobody listens: nothing is read
        listeners = [Listener(base, ADMIN)]
        try:
            await wait_for(lambda: listeners[0].events, timeout=30)
            listeners += [Listener(base, ADMIN if i % 2 else f"{agent}-only") for i in range(19)]
            await wait_for(lambda: all(x.events for x in listeners), timeout=60)
            assert all((run_id, agent, "g1") in x.calls() for x in listeners)
            assert watcher.reads == 1  # twenty clients, one read
        finally:
            for listener in listeners:
                await listener.close()
        await wait_for(lambda: not watcher.running, timeout=30)  # the last one out stops it
        await client.get_workflow_handle(run_id).terminate("test over")
