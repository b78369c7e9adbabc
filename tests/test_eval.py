"""`toren eval`, `toren.client.start_eval` and `toren.testing`'s eval helpers.

What an eval must never do is execute an `external` tool: the tools here append a line to a
file each time they run, so their executions are counted outside Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import fetch_history, result_of, task_failures
from tests.test_fork import (
    GATED_REFUND,
    LOOKUP,
    NOTE,
    REFUND,
    REFUND_SCRIPT,
    call,
    cli,
    ran,
    saw,
    tools,
)
from toren import client as toren_client
from toren import testing
from toren.worker import serve
from toren.worker.models import ScriptedModel

PEEK = """
from toren import define_tool

def peek(args, ctx):
    with open(LOG, "a") as f:
        f.write("peek\\n")
    return f"stock of {args['order_id']}: 3"

tool = define_tool(
    description="Look at the stock (no effects).",
    input={"type": "object", "properties": {"order_id": {"type": "string"}}},
    effects="none",
    handler=peek,
)
"""


def order_of(messages: list[dict[str, Any]]) -> str:
    first = next(m for m in messages if m.get("role") == "user")
    found = re.search(r"[A-Z]-\d+", str(first.get("content")))
    return found.group(0) if found else "?"


def original(messages: list[dict[str, Any]]) -> Any:
    """The recorded agent: look the order up, refund it, say so (by the turn it is at)."""
    order = order_of(messages)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    return [
        call("lookup", f"l-{order}", order_id=order),
        call("refund", f"r-{order}", order_id=order),
        f"refunded {order}",
    ][turn]


def changed(messages: list[dict[str, Any]]) -> Any:
    """The changed agent: peeks at the stock first; refunds odd orders, A-3 twice over."""
    order = order_of(messages)
    number = int(order.split("-")[1])
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    steps: list[Any] = [
        call("peek", f"p-{order}", order_id=order),
        call("lookup", f"l-{order}", order_id=order),
    ]
    if number % 2:
        target = "B-9" if number == 3 else order
        steps.append(call("refund", f"r-{order}", order_id=target))
    steps.append(f"done {order}: {messages[-1].get('content')}")
    return steps[turn]


async def test_an_eval_of_five_runs_executes_no_external_tool(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND, peek=PEEK))
    queue = f"{folder.name}.eval-{uuid.uuid4().hex[:6]}"
    orders = [f"A-{n}" for n in range(1, 6)]
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel([original] * 3)}),
        serve(
            client, [folder], models={"mock/scripted": ScriptedModel([changed] * 4)},
            task_queue=queue,
        ),
    ):  # fmt: skip
        sources = [
            await toren_client.start_run(client, folder.name, f"My order {o} broke") for o in orders
        ]
        for source in sources:
            await result_of(source)
        assert sorted(ran(log)) == sorted(["lookup", "refund"] * 5)
        log.unlink()
        read = [await toren_client.eval_source(client, s.id) for s in sources]
        evals = [await toren_client.start_eval(client, s, task_queue=queue) for s in read]
        results = [await result_of(e) for e in evals]
        histories = [await fetch_history(client, e.id) for e in evals]
        candidates = [
            toren_client.trajectory(await toren_client.events(client, e.id), e.id) for e in evals
        ]
    # Only the `none` tool ran, once per eval run; no lookup or refund ran again.
    assert ran(log) == ["peek"] * 5
    assert not [f for h in histories for f in task_failures(h)]
    # The eval path's memo upserts replay as recorded.
    assert all(check.ok for check in await toren_client.replay(histories)), "replay"
    texts = [r.text for r in results]
    assert texts[0] == "done A-1: refunded A-1"  # the recorded refund's result
    assert texts[1] == "done A-2: order A-2: paid 40 EUR, arrived broken"  # no refund asked
    assert texts[2].startswith('done A-3: eval: refund("order_id": "B-9") was not called')
    where = [
        str(toren_client.divergence(s.trajectory, c)) for s, c in zip(read, candidates, strict=True)
    ]
    assert all(w.startswith('#1: lookup("order_id": "A-') for w in where), where
    answers = [[c.eval for c in t.calls] for t in candidates]
    assert answers[0] == [None, "recorded", "recorded"]
    assert answers[1] == [None, "recorded"]
    assert answers[2] == [None, "recorded", "diverged"]
    events = await toren_client.events(client, evals[2].id)
    assert events[0]["evalOf"] == sources[2].id
    assert [e["answer"] for e in events if e["type"] == "EvalAnswered"] == ["recorded", "diverged"]


async def eval_of(
    client: Client, source: Any, queue: str, on_diverge: str = "continue"
) -> tuple[Any, toren_client.Trajectory]:
    """Eval `source` (a handle) on `queue`; the eval run's handle and trajectory."""
    read = await toren_client.eval_source(client, source.id)
    handle = await toren_client.start_eval(client, read, task_queue=queue, on_diverge=on_diverge)
    with contextlib.suppress(WorkflowFailureError):
        await result_of(handle)
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    return handle, toren_client.trajectory(await toren_client.events(client, handle.id), handle.id)


async def test_recorded_decisions_are_taken_and_unrecorded_ones_would_ask(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=GATED_REFUND))
    queue = f"{folder.name}.eval-{uuid.uuid4().hex[:6]}"
    again = [call("refund", "r1", order_id="A-1"), call("refund", "r2", order_id="A-2"), saw]
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}),
        serve(client, [folder], models={"mock/scripted": ScriptedModel(again)}, task_queue=queue),
    ):
        source = await toren_client.start_run(client, folder.name, "My order A-1 broke")
        [waiting] = await toren_client.wait_for_approval(client, source.id)
        await toren_client.approve(client, source.id, waiting.call_id, by="alice")
        await result_of(source)
        log.unlink()
        handle, path = await eval_of(client, source, queue)
    assert not ran(log)
    refund, other = path.calls
    assert (refund.eval, refund.result) == ("recorded", "refunded A-1")
    assert refund.approval == {"asked": True, "approved": True, "by": "alice", "comment": "",
                               "via": "eval"}  # fmt: skip
    assert other.eval == "would_ask" and other.is_error
    assert "would ask a person for approval" in str(other.result)
    assert path.final is not None and "refunded A-1" in path.final


async def test_on_diverge_stop_fails_the_eval_run(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND))
    queue = f"{folder.name}.eval-{uuid.uuid4().hex[:6]}"
    other = [call("refund", "r9", order_id="A-9"), "never"]
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}),
        serve(client, [folder], models={"mock/scripted": ScriptedModel(other)}, task_queue=queue),
    ):
        source = await toren_client.start_run(client, folder.name, "My order A-1 broke")
        await result_of(source)
        handle, path = await eval_of(client, source, queue, on_diverge="stop")
    assert ran(log) == ["lookup", "refund"]
    assert (path.status, path.error_kind) == ("failed", "Diverged")
    assert 'refund("order_id": "A-9") was not called' in str(path.error)


async def test_a_sandbox_call_runs_over_the_workspace_its_recorded_call_had(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"note": NOTE})
    queue = f"{folder.name}.eval-{uuid.uuid4().hex[:6]}"
    script = [call("note", "n1", text="a"), call("note", "n2", text="b"), "{last_tool_result}"]
    # The changed agent skips the first note: its "b" matches the recorded second call, which
    # started from the files the first one left.
    skips = [call("note", "n2", text="b"), "{last_tool_result}"]
    async with (
        serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}),
        serve(client, [folder], models={"mock/scripted": ScriptedModel(skips)}, task_queue=queue),
    ):
        source = await toren_client.start_run(client, folder.name, "take notes")
        assert (await result_of(source)).text == "a\nb\n"
        handle, path = await eval_of(client, source, queue)
    assert path.final == "a\nb\n"
    assert [c.eval for c in path.calls] == [None]  # executed, as a sandbox call is


# -- the command ---------------------------------------------------------------------------


def changed_copy(folder: Path, tmp_path: Path, script: list[Any], instructions: str) -> Path:
    """A copy of `folder` (the same agent) with another script and instructions."""
    copy = tmp_path / "v2" / folder.name
    shutil.copytree(folder, copy)
    (copy / "mock_script.yaml").write_text(yaml.safe_dump(script))
    (copy / "instructions.md").write_text(instructions)
    return copy


async def test_the_command_reports_where_each_run_diverged(
    client: Client, make_agent: Callable[..., Path], dev_server: Any, tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND), script=REFUND_SCRIPT)
    v2 = changed_copy(
        folder, tmp_path,
        [call("lookup", "l1", order_id="A-1"), call("refund", "r1", order_id="A-2"),
         "said: {last_tool_result}"],
        "Refund the order after next.",
    )  # fmt: skip
    async with serve(client, [folder]):
        sources = [
            await toren_client.start_run(client, folder.name, f"My order A-{n} broke")
            for n in range(1, 4)
        ]
        for source in sources:
            await result_of(source)
    log.unlink()
    out = await cli(
        dev_server.address, "eval", str(v2), "--runs", *[s.id for s in sources],
        "--out", str(tmp_path / "report"), "--parallel", "2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not ran(log)  # no external tool ran, while 3 runs were re-run
    lines = out.stdout.splitlines()
    for source in sources:
        [row] = [line for line in lines if line.startswith(source.id)]
        assert '#2: refund("order_id": "A-1") → refund("order_id": "A-2")' in row, row
        assert "1/1/0" in row  # one answered from the record, one diverged, none would ask
    assert lines[-2].startswith("3 runs, 0 unchanged, mean exact_match 0.00")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [r["source"] for r in report["runs"]] == [s.id for s in sources]
    assert report["runs"][0]["divergence"]["index"] == 1
    assert report["runs"][0]["candidate"]["turns"][1]["calls"][0]["eval"] == "diverged"
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert f"## `{sources[0].id}` →" in markdown and "| 2 ⚠ |" in markdown
    # The eval runs are marked by their memo, on a queue of their own.
    eval_run = report["runs"][0]["eval_run"]
    described = await client.get_workflow_handle(eval_run).describe()
    assert (await described.memo())["toren_eval"] == {"source": sources[0].id,
                                                       "agent": folder.name}  # fmt: skip
    assert str(described.task_queue).startswith(f"{folder.name}.eval")


def my_scorer(original: Any, candidate: Any) -> dict[str, float]:
    return {"calls": float(len(candidate.calls))}


async def test_bad_input_is_one_clear_line(
    client: Client, make_agent: Callable[..., Path], dev_server: Any, tmp_path: Path
) -> None:
    folder = make_agent(script=["done"])
    other = make_agent(script=["done"], name="t_other_agent")
    async with serve(client, [folder, other]):
        source = await toren_client.start_run(client, folder.name, "hi")
        elsewhere = await toren_client.start_run(client, other.name, "hi")
        await result_of(source)
        await result_of(elsewhere)
        thread = await toren_client.start_thread(client, folder.name)
        cases = {
            "--runs RUN... or --query QUERY": [],
            "no run 'no-such-run'": ["--runs", "no-such-run"],
            "cannot import 'no_such_module'": ["--runs", source.id, "--scorer", "no_such_module:f"],
            "module 'json' has no function 'nope'": ["--runs", source.id, "--scorer", "json:nope"],
            "is not module:function": ["--runs", source.id, "--scorer", "nothing"],
            f"is of agent '{other.name}'": ["--runs", elsewhere.id],
            "is a thread": ["--runs", thread.id],
            "--on-diverge takes continue or stop": ["--runs", source.id, "--on-diverge", "x"],
            "chooses no closed agent run": ["--query", "TorenAgent = 'nobody-at-all'"],
        }
        outs = await asyncio.gather(
            *(cli(dev_server.address, "eval", str(folder), *args) for args in cases.values())
        )
        await toren_client.close_thread(client, thread.id)
    for said, out in zip(cases, outs, strict=True):
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (said, out.stderr)
        assert len(lines) == 1 and said in lines[0], (said, out.stderr)


async def test_toren_testing_evals_recorded_files_and_runs_in_pytest(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "ran.txt"
    folder = make_agent(tools=tools(log, lookup=LOOKUP, refund=REFUND))
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}):
        runs = [
            await toren_client.start_run(client, folder.name, f"My order A-{n} broke")
            for n in (1, 2)
        ]
        for run in runs:
            await result_of(run)
    saved = tmp_path / f"{runs[0].id}.json"
    saved.write_text((await fetch_history(client, runs[0].id)).to_json())
    log.unlink()
    from_file = await testing.load_recorded([saved])
    from_server = await testing.recorded_runs(client, query=f"TorenAgent = '{folder.name}'")
    assert from_file[0].run_id == runs[0].id
    assert sorted(s.run_id for s in from_server) == sorted(r.id for r in runs)
    # The same agent reproduces its record; a changed one diverges, and says where.
    same = await testing.eval_agent(
        client, folder, from_file, models={"mock/scripted": ScriptedModel(REFUND_SCRIPT)}
    )
    testing.assert_no_divergence(same)
    assert same[0].candidate.final == "refunded: refunded A-1"
    assert same[0].scores == {"exact_match": 1.0, "tool_sequence": 1.0}
    brief = [call("lookup", "l1", order_id="A-1"), "no refund"]
    cases = await testing.eval_agent(
        client, folder, from_server, models={"mock/scripted": ScriptedModel(brief)}
    )
    with pytest.raises(AssertionError, match="2 of 2 runs diverged") as failed:
        testing.assert_no_divergence(cases)
    assert '#2: refund("order_id": "A-1") → answer "no refund"' in str(failed.value)
    assert not ran(log)
    # Eval runs are left out of a later query's recorded runs.
    again = await testing.recorded_runs(client, query=f"TorenAgent = '{folder.name}'")
    assert sorted(s.run_id for s in again) == sorted(r.id for r in runs)
