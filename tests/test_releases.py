"""toren's previous release and the current code work side by side (issue 32).

A team upgrading toren runs old and new workers on one task queue for a while, and its runs and
threads outlive a release. So: the previous release's histories replay on the current code;
its wire types and today's read each other's payloads; and its workers and today's serve one
task queue together, each taking over runs the other started, with workers of both killed
mid-call. The previous release is the wheel in `tests/fixtures/releases/` (`tests._releases`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker

from tests._releases import env_for, previous_version, unpack
from tests._wire_types import wire_types
from tests.conftest import DevServer, keep_history, result_of, task_failures, wait_for
from tests.histories.record_release import RUNS, THREADS, workflow_id
from toren import AgentRun, AgentThread
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.errors import RunError
from toren.worker import serve
from toren.worker.activities._runtime import AgentRuntime
from toren.workflows._input import one_raw_input

VERSION = previous_version()
HISTORIES = sorted((Path(__file__).parent / "histories").glob("release-*/*.json"))
"""What releases recorded (`tests/histories/record_release.py`): the previous one's, and older
ones' until their directory is deleted (when the code drops the patches they need)."""

START_INPUTS = {"RunInput": "AgentRun", "ThreadInput": "AgentThread"}
"""The workflows' start inputs. A workflow refuses a start input key it does not know (a typo
guard for people), and toren writes these too (continue-as-new, child runs): a new field fails
a run whose next input a worker of the previous release reads."""
NEW_KINDS = {
    "RunInput.fork": "a fork (`toren fork`) is a new kind of run: a 0.1.0 worker refuses its "
    "start at once, non-retryably, naming the key (forks need upgraded workers), and a "
    "continued run's input leaves it out (`RunInput.continued_with`)",
    "RunInput.eval": "an eval run (`toren eval`) is a new kind of run, started only on a task "
    "queue the eval command serves with the current code: a 0.1.0 worker refuses its start at "
    "once, non-retryably, naming the key, and a continued run's input leaves it out (its record "
    "travels in `RunState.eval`)",
}
"""Start input fields that begin a kind of run the previous release cannot run: it should
refuse the start at once, naming the key, which is what its strict input check does. Each says
why the previous release never meets the key on a path it can run."""
RENAMED: dict[str, str] = {}
"""Wire types of the previous release renamed since, old name to new (a class's name is not on
the wire, its fields are): the guard then compares their fields."""


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release unzipped; a subprocess with it first on `PYTHONPATH` runs it."""
    return unpack(tmp_path_factory.mktemp("release"))


# -- its histories replay -------------------------------------------------------------------


def test_the_previous_release_recorded_every_path() -> None:
    names = {p.name.split(".")[0] for p in HISTORIES if p.parent.name == f"release-{VERSION}"}
    assert names == {*RUNS, *THREADS}, "record them: python tests/histories/record_release.py"


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_a_history_of_the_previous_release_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(workflow_id(path.name), path.read_text())
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)  # raises on any nondeterminism
    assert not task_failures(history)
    # Every run of a chain but the last continued as new; each path ends as it did then.
    name, _, n = path.stem.rpartition(".")
    if n.isdigit() and path.with_name(f"{name}.{int(n) + 1}.json").exists():
        end = "RunContinuedAsNew"
    else:
        end = "ThreadClosed" if path.stem.startswith("thread_") else "RunCompleted"
    assert render(history)[-1]["type"] == end


# -- its wire types and today's read each other ---------------------------------------------


def wire_problems(old: dict[str, Any], new: dict[str, Any], version: str) -> list[str]:
    """Why payloads of one release would not decode in the other, one line per field.

    `old` and `new` are `tests._wire_types.wire_types()` of the previous release and of the
    current code. Pydantic ignores a field it does not know and fails on a missing one that has
    no default, and `omit_defaults` types leave out every field that holds its default.
    """
    problems: list[str] = []
    for name, was in old.items():
        now = new.get(RENAMED.get(name, name))
        if now is None:
            problems.append(
                f"{name}: a wire type of {version} is gone (renamed? add it to RENAMED)"
            )
            continue
        for field, defaulted in now["fields"].items():
            if field not in was["fields"] and f"{name}.{field}" in NEW_KINDS:
                continue
            if field not in was["fields"] and name in START_INPUTS:
                problems.append(
                    f"{name}.{field}: new, and {version}'s {START_INPUTS[name]} refuses an input "
                    "key it does not know (carry it in RunState or ThreadCarry)"
                )
            elif field not in was["fields"] and not defaulted:
                problems.append(
                    f"{name}.{field}: new and required, but {version} never writes it "
                    "(give it a default)"
                )
            elif was["fields"].get(field) and not defaulted:
                problems.append(
                    f"{name}.{field}: had a default in {version}, which may leave it out; "
                    "now required (keep the default)"
                )
        for field, defaulted in was["fields"].items():
            if defaulted:
                continue
            if field not in now["fields"]:
                problems.append(
                    f"{name}.{field}: {version} requires it, and it is gone (keep it for a release)"
                )
            elif now["fields"][field] and now["omits_defaults"]:
                problems.append(
                    f"{name}.{field}: {version} requires it, and now it has a default that "
                    f"{name} (omit_defaults) leaves out (keep it required for a release)"
                )
    return problems


def release_wire_types(site: Path, cwd: Path) -> dict[str, Any]:
    script = Path(__file__).parent / "_wire_types.py"
    out = subprocess.run(
        [sys.executable, str(script)],
        env=env_for(site),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert Path(found["toren"]).is_relative_to(site), found["toren"]
    types: dict[str, Any] = found["types"]
    return types


def test_wire_types_read_both_ways(previous_release: Path, tmp_path: Path) -> None:
    old = release_wire_types(previous_release, tmp_path)
    new = wire_types()
    # Found, not listed: the run's, thread's and activities' types and all they hold.
    assert {"RunInput", "RunState", "ThreadCarry", "ToolCallInput", "AgentSpec"} <= set(new)
    problems = wire_problems(old, new, VERSION)
    assert not problems, "\n".join(problems)


def test_the_wire_guard_names_each_break() -> None:
    def kind(fields: dict[str, bool], omits: bool = True) -> dict[str, Any]:
        return {"module": "toren.agent._types", "omits_defaults": omits, "fields": fields}

    old = {"A": kind({"a": False, "b": True, "c": False}), "B": kind({"x": False})}
    same = {"A": kind({"a": False, "b": True, "c": False, "d": True}), "B": kind({"x": False})}
    assert wire_problems(old, same, "0.1.0") == []
    broken = {"A": kind({"a": True, "b": False, "d": False}), "C": kind({"x": False})}
    assert wire_problems(old, broken, "0.1.0") == [
        "A.b: had a default in 0.1.0, which may leave it out; now required (keep the default)",
        "A.d: new and required, but 0.1.0 never writes it (give it a default)",
        "A.a: 0.1.0 requires it, and now it has a default that A (omit_defaults) leaves out "
        "(keep it required for a release)",
        "A.c: 0.1.0 requires it, and it is gone (keep it for a release)",
        "B: a wire type of 0.1.0 is gone (renamed? add it to RENAMED)",
    ]
    start = {"RunInput": kind({"agent": False}), "ThreadInput": kind({"agent": False})}
    grown = {**start, "RunInput": kind({"agent": False, "tenant": True})}
    assert wire_problems(start, grown, "0.1.0") == [
        "RunInput.tenant: new, and 0.1.0's AgentRun refuses an input key it does not know "
        "(carry it in RunState or ThreadCarry)"
    ]
    # A new kind of run the previous release refuses at once is the one exception.
    forked = {**start, "RunInput": kind({"agent": False, "fork": True, "tenant": True})}
    assert wire_problems(start, forked, "0.1.0") == [
        "RunInput.tenant: new, and 0.1.0's AgentRun refuses an input key it does not know "
        "(carry it in RunState or ThreadCarry)"
    ]
    # A type written whole may take a default: the field is still in every payload it writes.
    assert wire_problems(old, {**same, "A": kind({"a": True, "b": True, "c": False}, omits=False)}, "0.1.0") == []  # fmt: skip


# -- its workers and today's on one task queue ----------------------------------------------

BLOCK = """
import json, os, time
from pathlib import Path
import toren
from toren import define_tool

def block(args, ctx):
    line = {"run": ctx.run_id, "key": ctx.idempotency_key, "attempt": ctx.attempt,
            "release": "old" if toren.__file__.startswith(OLD) else "new", "pid": os.getpid()}
    with open(STARTS, "a") as f:
        f.write(json.dumps(line) + "\\n")
    while not Path(GATE).exists():  # blocks until the test opens the gate: kills land here
        time.sleep(0.05)
    with open(EFFECTS, "a") as f:
        f.write(ctx.idempotency_key + "\\n")
    return "blocked and done"

tool = define_tool(description="Wait for the gate.", effects="external", idempotency="keyed",
                   max_attempts=3, handler=block)
"""

NOTE = """
from toren import define_tool

def note(args, ctx):
    with open(EFFECTS, "a") as f:
        f.write(ctx.idempotency_key + "\\n")
    return "noted"

tool = define_tool(description="Note something.", effects="external", handler=note)
"""

LOOKUP = """
from toren import define_tool
tool = define_tool(description="A pure lookup (a local activity).", effects="none",
                   idempotency="none", timeout_ms=2000, handler=lambda a, c: "found")
"""

SCRIPT = [
    {"tool_calls": [{"id": "n1", "name": "note", "args": {}}, {"id": "l1", "name": "lookup", "args": {}}]},
    {"tool_calls": [{"id": "b1", "name": "block", "args": {}}]},
    "done: {last_tool_result}",
    {"tool_calls": [{"id": "n2", "name": "note", "args": {}}]},  # the thread's second message
    "second: {last_tool_result}",
    "third",
]  # fmt: skip


class Workers:
    """`toren worker` subprocesses of either release for one agent folder."""

    def __init__(self, folder: Path, server: DevServer, site: Path, logs: Path) -> None:
        self.folder, self.logs = folder, logs
        new = {**os.environ, "TEMPORAL_ADDRESS": server.address}
        self.env = {"old": env_for(site, new), "new": new}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.release: dict[str, str] = {}
        """The release of each worker by its identity (`<pid>@<host>`, the SDK's default)."""

    def start(self, release: str) -> subprocess.Popen[bytes]:
        with (self.logs / f"{release}-{len(self.procs)}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "toren.cli", "worker", str(self.folder)],
                env=self.env[release],
                cwd=self.logs,  # not the repo root, whose toren/ would come first on sys.path
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        self.release[f"{proc.pid}@{socket.gethostname()}"] = release
        return proc

    def served(self, history: WorkflowHistory) -> set[str]:
        """The releases whose workers completed the run's workflow tasks."""
        return {
            self.release[e.workflow_task_completed_event_attributes.identity]
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        }

    def stop(self, proc: subprocess.Popen[bytes], how: signal.Signals) -> None:
        proc.send_signal(how)
        proc.wait(timeout=60)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


DECODE_FAILED = re.compile(r"validation errors? for|failed decoding", re.IGNORECASE)
"""What a payload one release could not read leaves in a failure or a worker's log (pydantic's
`1 validation error for ToolCallInput`, the SDK's `Failed decoding arguments`)."""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_old_and_new_workers_serve_one_queue(
    client: Client,
    dev_server: DevServer,
    make_agent: Callable[..., Path],
    previous_release: Path,
    tmp_path: Path,
) -> None:
    """Each release alone in turn, so who ran what is known: old, new, old, new.

    Every `block` call waits for the gate, so each SIGKILL lands inside calls; a killed call is
    retried after the heartbeat timeout (10 s) by whichever worker is up.
    """
    starts, effects, gate = tmp_path / "starts.jsonl", tmp_path / "effects.txt", tmp_path / "gate"
    paths = f"STARTS, EFFECTS, GATE = {str(starts)!r}, {str(effects)!r}, {str(gate)!r}\n"
    paths += f"OLD = {str(previous_release)!r}\n"
    folder = make_agent(
        tools={"block": paths + BLOCK, "note": paths + NOTE, "lookup": LOOKUP}, script=SCRIPT
    )
    workers = Workers(folder, dev_server, previous_release, tmp_path)

    def started(release: str, attempt: int) -> set[str]:
        return {
            s["run"]
            for s in map(json.loads, lines(starts))
            if s["release"] == release and s["attempt"] == attempt
        }

    def readable() -> bool:
        """Fails the test at a worker's first payload it could not decode (its log says so)."""
        for log in tmp_path.glob("*.log"):
            for line in log.read_text().splitlines():
                assert not DECODE_FAILED.search(line), f"{log.name}: {line}"
        return True

    first: asyncio.Future[dict[str, Any]] | None = None
    try:
        # The old release starts two runs and a thread's first message; killed mid-call.
        old = workers.start("old")
        runs = [await toren_client.start_run(client, folder.name, "go") for _ in range(2)]
        thread = await toren_client.start_thread(client, folder.name)
        first = asyncio.ensure_future(toren_client.send_message(client, thread.id, "one"))
        early = {*(r.id for r in runs), thread.id}
        await wait_for(lambda: readable() and started("old", 1) == early, timeout=60)
        workers.stop(old, signal.SIGKILL)
        # The new release alone: two runs of its own, and the old one's calls, retried.
        new = workers.start("new")
        runs += [await toren_client.start_run(client, folder.name, "go") for _ in range(2)]
        late = {r.id for r in runs[2:]}
        await wait_for(
            lambda: readable() and started("new", 1) == late and started("new", 2) == early, 60
        )
        workers.stop(new, signal.SIGKILL)
        # The old release again, alone: it finishes every run, the new release's included.
        again = workers.start("old")
        gate.touch()
        await wait_for(lambda: readable() and len(lines(effects)) == 10, timeout=60)
        results = [await result_of(r, timeout=60) for r in runs]
        answer = await asyncio.wait_for(first, timeout=60)
        assert started("old", 3) == early and started("old", 2) == late
        # The new release alone takes the thread over at rest: two more messages, then close.
        workers.stop(again, signal.SIGTERM)
        workers.start("new")
        second = await toren_client.send_message(client, thread.id, "two")
        third = await toren_client.send_message(client, thread.id, "three")
        await toren_client.close_thread(client, thread.id)
    finally:
        workers.stop_all()
        if first is not None:
            first.cancel()  # a no-op once answered

    assert [r.text for r in results] == ["done: blocked and done"] * 4
    assert [answer["text"], second["text"], third["text"]] == [
        "done: blocked and done", "second: noted", "third",
    ]  # fmt: skip
    # Each call's effect happened once: every note once, every block once however often killed.
    # Keys are `<workflow id>:<step>:<call id>`; a thread's step is `<execution>.<step>`.
    blocks = {r.id: f"{r.id}:2:b1" for r in runs} | {thread.id: f"{thread.id}:1.2:b1"}
    notes = [f"{r.id}:1:n1" for r in runs] + [f"{thread.id}:1.1:n1", f"{thread.id}:2.1:n2"]
    assert sorted(lines(effects)) == sorted([*blocks.values(), *notes])
    for s in map(json.loads, lines(starts)):  # one key for every attempt of a call
        assert s["key"] == blocks[s["run"]]
    chains = {r.id: await toren_client.histories(client, r.id) for r in [*runs, thread]}
    # Each release took over runs the other started: the old one finished the new one's runs,
    # the new one answered the thread's later messages, the old one its first.
    for run in [*late, thread.id]:
        assert set().union(*map(workers.served, chains[run])) == {"old", "new"}, run
    histories = [h for chain in chains.values() for h in chain]
    for history in histories:
        keep_history(client, history)
        assert not task_failures(history), history.workflow_id
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                failure = str(event.activity_task_failed_event_attributes.failure)
                assert not DECODE_FAILED.search(failure), failure
    # Failed attempts that a retry then recovered leave no event: the workers' logs have them.
    assert readable()


# -- the next release may add a key to a continued run's input -----------------------------


@workflow.defn(name="AgentThread", sandboxed=False)
class _NextReleaseThread(AgentThread):
    """`AgentThread` as a newer release might write its continue-as-new input: one more key."""

    @workflow.run
    @one_raw_input
    async def run(self, *args: RawValue) -> Any:  # type: ignore[override]
        return await super().run(*args)

    def _next_input(self, carried: Any) -> Any:
        return {**dataclasses.asdict(super()._next_input(carried)), "from_the_future": [1]}


async def test_a_continued_input_with_a_newer_key_is_taken(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    """A worker of this release reads a thread's next input written by the release after it.

    Unknown keys of an input toren wrote itself (continuing as new) are ignored, as unknown
    fields of every wire type are; a person's start input is still checked strictly
    (tests/test_run_input.py).
    """
    folder = make_agent(script=["one", "two", "three"], limits={"continueAsNewAfterEvents": 100})
    runtime = AgentRuntime.load([folder], os.environ)
    runtime.serve_on(folder.name)
    # A client without toren's plugin, whose worker would register the current AgentThread too.
    bare = Client(
        client.service_client, namespace=client.namespace, data_converter=client.data_converter
    )
    newer = Worker(
        bare,
        task_queue=folder.name,
        workflows=[_NextReleaseThread],
        activities=runtime.activities(),
        workflow_failure_exception_types=[RunError],
    )
    async with newer:
        thread = await toren_client.start_thread(client, folder.name)
        # Past 100 events it continues as new at rest, writing the newer input; each next run
        # reads it (this release's input check).
        while len(await toren_client.histories(client, thread.id)) < 3:
            answer = await toren_client.send_message(client, thread.id, "more")
            assert answer["status"] == "completed", answer
    for history in await toren_client.histories(client, thread.id):
        assert task_failures(history) == []


# -- a fork is a kind of run the previous release refuses ------------------------------------


async def test_a_worker_of_the_previous_release_refuses_a_fork_or_an_eval_by_name(
    client: Client,
    dev_server: DevServer,
    make_agent: Callable[..., Path],
    previous_release: Path,
    tmp_path: Path,
) -> None:
    """`RunInput.fork` and `.eval` are the new start keys (`NEW_KINDS`): 0.1.0 fails them at once."""
    folder = make_agent(script=["one", "two"])
    old_folder = tmp_path / "old" / folder.name
    old_folder.parent.mkdir()
    subprocess.run(["cp", "-r", str(folder), str(old_folder)], check=True)
    queue = f"{folder.name}-old"
    with (old_folder / "agent.yaml").open("a") as f:
        f.write(f"task_queue: {queue}\n")
    workers = Workers(old_folder, dev_server, previous_release, tmp_path)
    try:
        workers.start("old")
        async with serve(client, [folder]):
            source = await toren_client.start_run(client, folder.name, "go")
            await result_of(source)
            fork = await toren_client.fork_run(client, source.id, 1, task_queue=queue)
            with pytest.raises(WorkflowFailureError) as failed:
                await result_of(fork, timeout=60)
            # `RunInput.eval` too: an eval run that reached an old worker fails by name.
            read = await toren_client.eval_source(client, source.id)
            evaluated = await toren_client.start_eval(client, read, task_queue=queue)
            with pytest.raises(WorkflowFailureError) as eval_failed:
                await result_of(evaluated, timeout=60)
    finally:
        workers.stop_all()
    for failure, key in ((failed, "fork"), (eval_failed, "eval")):
        cause = failure.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "InvalidRunInput"
        assert cause.non_retryable and f"unknown key {key!r}" in cause.message
    history = await client.get_workflow_handle(fork.id).fetch_history()
    keep_history(client, history)
    assert not task_failures(history)
    assert workers.served(history) == {"old"}
