"""Watching never blocks acting: many stream readers, in many processes, on one parked run.

Each reader used to hold a long-poll update on the run, and Temporal lets a workflow have 10
updates in flight: ten readers made every decision fail (`limit on number of concurrent in-flight
updates has been reached (10)`), readers that went away kept the slots until the run next
published, and each reader's wake-ups grew the history. Readers now read by query through one
loop per run per process (`toren.client._stream_feed`), and the run refuses long polls past
`MAX_OPEN_POLLS` (`toren.workflows._stream_state`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import httpx
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tests.conftest import DevServer, fetch_history, result_of, task_failures, wait_for
from toren import client as toren_client
from toren.client._stream_feed import feed_count
from toren.testing import free_port
from toren.worker import serve
from toren.workflows._stream_state import MAX_OPEN_POLLS, POLLS_FULL

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

GATED = """
from toren import define_tool
tool = define_tool(
    description="Needs a person.",
    input={"type": "object", "properties": {"n": {"type": "integer"}}},
    approval="always",
    handler=lambda a, c: "ran",
)
"""

TOKEN = "readers-admin-token"

READERS = """
import asyncio, sys
from toren import client as toren_client
from toren.connect import connect

async def main(run_id, n):
    client = await connect()

    async def one():
        first = True
        async for _ in toren_client.stream(client, run_id):
            if first:
                print("ready", flush=True)
                first = False

    await asyncio.gather(*(one() for _ in range(n)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""
"""A process of `n` `toren.client.stream` readers; prints `ready` as each reads its first item."""


GUARD_S = 90.0
"""A hang guard only (a refused decision may be retried by the client for ever): no latency
is asserted here; `bench/perf/readers.py` measures it."""


async def lands(what: str, action: Awaitable[T]) -> T:
    """`action`'s result; fails the test if it is refused or still waits after `GUARD_S`."""
    try:
        return await asyncio.wait_for(action, GUARD_S)
    except TimeoutError:
        raise AssertionError(f"{what} did not land in {GUARD_S:.0f} s") from None


def gated_script(calls: int) -> list[Any]:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"g{i}", "name": "gated", "args": {"n": i}}]}
        for i in range(1, calls + 1)
    ]
    return [*turns, "all done"]


async def waiting(client: Client, run_id: str) -> list[str]:
    return [c.call_id for c in await toren_client.pending(client, run_id)]


async def wait_waiting(client: Client, run_id: str, call_id: str) -> None:
    async def check() -> bool:
        return await waiting(client, run_id) == [call_id]

    await wait_for(check, timeout=120, every=0.2)


@asynccontextmanager
async def processes() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Subprocesses started in the block, killed (SIGKILL) at its end if still alive."""
    started: list[asyncio.subprocess.Process] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


@asynccontextmanager
async def cancelling(tasks: list[asyncio.Future[Any]]) -> AsyncIterator[None]:
    """Tasks added in the block, cancelled at its end if still running."""
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def spawn(
    started: list[asyncio.subprocess.Process], dev_server: DevServer, *args: str, **env: str
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args,
        env={**os.environ, "TEMPORAL_ADDRESS": dev_server.address, **env},
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    started.append(proc)
    return proc


async def lines_of(proc: asyncio.subprocess.Process, out: list[str]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        out.append(line.decode(errors="replace").rstrip("\n"))


async def sse_client(
    http: httpx.AsyncClient, run_id: str, seen: list[dict[str, Any]], ended: list[bool]
) -> None:
    import json

    try:
        async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
    except httpx.HTTPError:
        pass
    finally:
        ended.append(True)


async def test_fifty_five_readers_in_four_processes_never_hold_back_a_decision(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer, run_id: str
) -> None:
    folder = make_agent(tools={"gated": GATED}, script=gated_script(5))
    port = free_port()
    sse_seen: list[list[dict[str, Any]]] = [[] for _ in range(50)]
    sse_ended: list[bool] = []
    own: list[str] = []
    out_readers: list[str] = []
    out_follow: list[str] = []
    tasks: list[asyncio.Future[Any]] = []
    async with (
        serve(client, [folder]),
        processes() as started,
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=httpx.Timeout(120, connect=30),
            limits=httpx.Limits(max_connections=100),
        ) as http,
        cancelling(tasks),
    ):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await wait_waiting(client, run_id, "g1")

        # Process 1: `toren serve`, with 50 SSE clients on the run.
        server = await spawn(
            started, dev_server, "-m", "toren.cli", "serve", "--port", str(port),
            TOREN_WEB_TOKENS=TOKEN,
        )  # fmt: skip

        async def serving() -> bool:
            with suppress(httpx.TransportError):
                return (await http.get(f"/v1/runs/{run_id}/pending")).status_code == 200
            return False

        out_server: list[str] = []
        tasks.append(asyncio.ensure_future(lines_of(server, out_server)))  # a full pipe blocks it
        await wait_for(serving, timeout=60, every=0.2)
        tasks += [
            asyncio.ensure_future(sse_client(http, run_id, seen, sse_ended)) for seen in sse_seen
        ]
        # Process 2: three `toren.client.stream` readers; process 3: `toren events --follow`
        # (which follows the stream as `toren run` does); and one reader in this process.
        readers = await spawn(started, dev_server, "-c", READERS, run_id, "3")
        follow = await spawn(started, dev_server, "-m", "toren.cli", "events", run_id, "-f")
        tasks += [
            asyncio.ensure_future(lines_of(readers, out_readers)),
            asyncio.ensure_future(lines_of(follow, out_follow)),
        ]

        async def read_here() -> None:
            async for event in toren_client.stream(client, run_id):
                own.append(event.type)

        tasks.append(asyncio.ensure_future(read_here()))

        here = tasks[-1]

        def settled() -> bool:
            # Each reader reads the run's first items, or was refused and gave up; which it
            # is, is checked after the decisions, which come first.
            sse = sum(any(e.get("type") == "approval_requested" for e in seen) for seen in sse_seen)
            return (
                sse + len(sse_ended) >= 50
                and (out_readers.count("ready") == 3 or readers.returncode is not None)
                and (
                    any("ApprovalRequested" in line for line in out_follow)
                    or follow.returncode is not None
                )
                and ("approval_requested" in own or here.done())
            )

        await wait_for(settled, timeout=120, every=0.2)

        # 1. The HTTP API.
        decided = await lands(
            "the HTTP decision",
            http.post(
                f"/v1/runs/{run_id}/decisions",
                json={"call_id": "g1", "approve": True, "by": "http"},
                timeout=GUARD_S - 10,
            ),
        )
        assert decided.status_code == 200, decided.text
        # 2. The CLI.
        await wait_waiting(client, run_id, "g2")
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "toren.cli", "approve", run_id, "g2", "--by", "cli",
            env={**os.environ, "TEMPORAL_ADDRESS": dev_server.address}, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        cli_out, _ = await lands("toren approve", cli.communicate())
        assert cli.returncode == 0, cli_out.decode()
        # 3. The `approve` signal.
        await wait_waiting(client, run_id, "g3")
        await lands(
            "the approve signal", handle.signal("approve", {"call_id": "g3", "by": "signal"})
        )
        # 4. The `decide` update.
        await wait_waiting(client, run_id, "g4")
        decision = await lands(
            "the decide update", toren_client.approve(client, run_id, "g4", by="update")
        )
        assert decision.approved and decision.by == "update"
        await wait_waiting(client, run_id, "g5")

        # Every SSE client got every decision, through the one reader its server shares.
        def all_decided() -> bool:
            return all(
                {e.get("call_id") for e in seen if e.get("type") == "approval_decided"}
                == {"g1", "g2", "g3", "g4"}
                for seen in sse_seen
            )

        assert not sse_ended, f"{len(sse_ended)} SSE streams ended before the run did"
        assert readers.returncode is None and follow.returncode is None and not here.done(), (
            f"a reader gave up: {out_readers[-3:]}, {out_follow[-3:]}"
        )
        assert out_readers.count("ready") == 3 and "approval_decided" in own
        await wait_for(all_decided, timeout=60, every=0.2)

        # Every reader goes away abruptly: nothing they held delays the next decision.
        for proc in (server, readers, follow):
            proc.kill()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        decision = await lands(
            "the decision after the kill",
            toren_client.approve(client, run_id, "g5", by="after-kill"),
        )
        assert decision.approved
        result = await handle.result()
    assert result.text == "all done"
    history = await fetch_history(client, run_id)
    assert not task_failures(history)
    polls = [
        e
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "__temporal_workflow_stream_poll"
    ]
    assert polls == [], "a reader long-polled the run"


async def test_watching_costs_the_same_history_with_one_reader_or_fifty(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(tools={"gated": GATED}, script=gated_script(2))
    counts: dict[int, int] = {}
    async with serve(client, [folder]):
        for readers in (1, 50):
            run_id = f"{folder.name}-{readers}-readers"
            async with processes() as started:
                handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
                await wait_waiting(client, run_id, "g1")
                # Half the readers in each of two processes (one process for one reader).
                outs: list[list[str]] = []
                tasks = []
                for n in (readers,) if readers == 1 else (readers // 2, readers - readers // 2):
                    proc = await spawn(started, dev_server, "-c", READERS, run_id, str(n))
                    outs.append([])
                    tasks.append(asyncio.ensure_future(lines_of(proc, outs[-1])))
                await wait_for(
                    lambda: sum(o.count("ready") for o in outs) == readers,  # noqa: B023
                    timeout=120,
                    every=0.2,
                )
                try:
                    await lands("a decision", toren_client.approve(client, run_id, "g1"))
                    await wait_waiting(client, run_id, "g2")
                    await asyncio.sleep(1)  # the readers watch the parked run a while
                    await lands("a decision", toren_client.approve(client, run_id, "g2"))
                    assert (await handle.result()).text == "all done"
                finally:
                    for task in tasks:
                        task.cancel()
            history = await fetch_history(client, run_id)
            assert not task_failures(history)
            counts[readers] = len(history.events)
    assert abs(counts[50] - counts[1]) <= 0.1 * counts[1], counts


async def test_sdk_long_poll_readers_past_a_few_are_refused_and_decisions_get_through(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    # Readers that long-poll with the SDK's own subscriber (or a toren from before): the run
    # keeps `MAX_OPEN_POLLS` of their updates open and refuses the rest.
    folder = make_agent(tools={"gated": GATED}, script=gated_script(1))
    refused: list[str] = []
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await wait_waiting(client, run_id, "g1")
        streams = WorkflowStreamClient.create(client, run_id)
        offset = await streams.get_offset()

        async def long_poll() -> None:
            try:
                async for _ in streams.subscribe(["toren"], from_offset=offset):
                    pass
            except WorkflowUpdateFailedError as err:
                refused.append(str(getattr(err.cause, "type", None)))

        pollers = [asyncio.ensure_future(long_poll()) for _ in range(12)]
        try:
            await wait_for(lambda: len(refused) == 12 - MAX_OPEN_POLLS, timeout=60, every=0.2)
            assert set(refused) == {POLLS_FULL}
            decision = await lands(
                "the decide update",
                toren_client.approve(client, run_id, "g1", by="past-the-pollers"),
            )
            assert decision.approved
            assert (await handle.result()).text == "all done"
        finally:
            for poller in pollers:
                poller.cancel()
            await asyncio.gather(*pollers, return_exceptions=True)
    assert not task_failures(await fetch_history(client, run_id))


async def test_the_readers_of_one_process_share_one_reader_that_stops_when_they_leave(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    folder = make_agent(tools={"gated": GATED}, script=gated_script(2))
    seen: list[list[int]] = []

    async def reader(offset: int) -> None:
        mine: list[int] = []
        seen.append(mine)
        async for event in toren_client.stream(client, run_id, offset):
            mine.append(event.offset)

    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await wait_waiting(client, run_id, "g1")
        first = [asyncio.ensure_future(reader(0)) for _ in range(20)]
        await wait_for(lambda: len(seen) == 20 and all(len(s) >= 3 for s in seen))
        assert feed_count() == 1
        await lands("a decision", toren_client.approve(client, run_id, "g1"))
        await wait_waiting(client, run_id, "g2")
        # Late readers, from the start and from an offset, join the same reader.
        late = [asyncio.ensure_future(reader(offset)) for offset in (0, 2)]
        await wait_for(lambda: len(seen) == 22 and seen[20] == seen[0] and seen[21][:1] == [2])
        assert feed_count() == 1
        for task in first + late:
            task.cancel()
        await asyncio.gather(*first, *late, return_exceptions=True)
        await wait_for(lambda: feed_count() == 0)
        await lands("a decision", toren_client.approve(client, run_id, "g2"))
        assert (await handle.result()).text == "all done"
    assert all(s == seen[0] for s in seen[:21]) and seen[21] == seen[0][2:]


async def test_a_thread_watched_by_many_readers_still_takes_messages(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(script=["first answer", "second answer"])
    thread_id = f"{folder.name}-watched"
    here: list[int] = []

    async def read_here() -> None:
        async for event in toren_client.stream(client, thread_id):
            here.append(event.offset)

    tasks: list[asyncio.Future[Any]] = []
    async with serve(client, [folder]), processes() as started, cancelling(tasks):
        await toren_client.start_thread(client, folder.name, thread_id=thread_id)
        out: list[str] = []
        proc = await spawn(started, dev_server, "-c", READERS, thread_id, "20")
        tasks.append(asyncio.ensure_future(lines_of(proc, out)))
        tasks += [asyncio.ensure_future(read_here()) for _ in range(20)]
        first = await lands("a message", toren_client.send_message(client, thread_id, "one"))
        assert first["text"] == "first answer"
        await wait_for(lambda: out.count("ready") == 20 and len(here) >= 20 * 3, timeout=120)
        second = await lands("a message", toren_client.send_message(client, thread_id, "two"))
        assert second["text"] == "second answer"
        assert proc.returncode is None and not any(t.done() for t in tasks[1:]), out[-3:]
        proc.kill()
        closed = await lands("closing", toren_client.close_thread(client, thread_id))
    assert closed is not None
    assert not task_failures(await fetch_history(client, thread_id))


async def test_a_reader_from_past_the_end_does_not_stall_the_others(
    client: Client, make_agent: Callable[..., Path], run_id: str
) -> None:
    """The first reader of a run asked from far past the stream's end (`?from=999999`, an old
    Last-Event-ID): the shared feed read from there for good, so every later reader of the run
    in that process got nothing new and ended without the run's final item (found in review)."""
    folder = make_agent(tools={"gated": GATED}, script=gated_script(1))
    got: list[int] = []

    async def reader(offset: int, into: list[int]) -> None:
        async for event in toren_client.stream(client, run_id, offset):
            into.append(event.offset)

    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go", run_id=run_id)
        await wait_waiting(client, run_id, "g1")
        far: list[int] = []
        tasks = [asyncio.ensure_future(reader(999_999, far))]
        async with cancelling(tasks):
            await wait_for(lambda: feed_count() == 1)
            tasks.append(asyncio.ensure_future(reader(0, got)))
            await wait_for(lambda: len(got) >= 3)
            await lands("a decision", toren_client.approve(client, run_id, "g1"))
            assert (await result_of(handle)).text == "all done"
            await lands("the last item", tasks[1])
        assert far == []
    assert got == list(range(len(got))) and len(got) > 3, got
