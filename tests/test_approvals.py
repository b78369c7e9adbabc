"""Approvals: a gated call parks the run; approve or deny by signal, CLI or client."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.conftest import fetch_history, result_of, task_failures, wait_for
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

PAY = """
import json
from toren import define_tool

def pay(args, ctx):
    with open(ctx.env["PAY_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    return f"paid {args['amount']}"

tool = define_tool(
    description="Pay someone.",
    input={"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]},
    effects="external",
    approval=lambda args: args["amount"] > 100,
    handler=pay,
)
"""


@pytest.fixture
def pay_agent(make_agent: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "pay.jsonl"
    folder = make_agent(
        tools={"pay": PAY},
        script=[
            {"tool_calls": [{"id": "small", "name": "pay", "args": {"amount": 5}},
                            {"id": "big", "name": "pay", "args": {"amount": 500}}]},
            "result: {last_tool_result}",
        ],
        env={"required": ["PAY_LOG"]},
    )  # fmt: skip
    return folder, log


async def park(client: Client, folder: Path) -> WorkflowHandle[Any, Any]:
    handle = await toren_client.start_run(client, folder.name, "pay them")
    calls = await wait_for(lambda: toren_client.pending(client, handle.id))
    assert [c.call_id for c in calls] == ["big"]
    assert calls[0].tool == "pay" and calls[0].args == {"amount": 500}
    return handle


def paid(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("via", ["signal", "cli", "client"])
async def test_approve(client: Client, pay_agent: tuple[Path, Path], via: str) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        assert paid(log) == [{"amount": 5}]  # the ungated call ran; the gated one waits
        if via == "signal":
            await handle.signal("approve", {"call_id": "big", "by": "alice", "comment": "ok"})
        elif via == "cli":
            out = await cli("approve", handle.id, "big", "--by", "alice")
            assert out.returncode == 0, out.stderr
            assert "big approved by alice" in out.stdout
        else:
            decision = await toren_client.approve(client, handle.id, "big", by="alice")
            assert decision.approved and decision.by == "alice"
        result = await result_of(handle)
    assert result.text == "result: paid 500"
    assert paid(log) == [{"amount": 5}, {"amount": 500}]  # ran exactly once
    events = render(await fetch_history(client, handle.id))
    resolved = [e for e in events if e["type"] == "ApprovalResolved"]
    assert resolved and resolved[0]["by"] == "alice" and resolved[0]["approved"] is True


@pytest.mark.parametrize("via", ["signal", "cli", "client"])
async def test_deny(client: Client, pay_agent: tuple[Path, Path], via: str) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        if via == "signal":
            await handle.signal("deny", {"call_id": "big", "by": "bob", "comment": "too much"})
        elif via == "cli":
            out = await cli("deny", handle.id, "big", "--by", "bob", "--comment", "too much")
            assert out.returncode == 0, out.stderr
        else:
            await toren_client.deny(client, handle.id, "big", by="bob", comment="too much")
        result = await result_of(handle)
    assert result.text == "result: denied by bob: too much"
    assert paid(log) == [{"amount": 5}]


async def test_malformed_signals_are_refused_and_the_run_goes_on(
    client: Client, pay_agent: tuple[Path, Path]
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        await handle.signal("approve")  # no payload at all (the Web UI's empty Data field)
        await handle.signal("approve", {})  # one pending call: {} must not approve it
        await handle.signal("approve", {"call_id": ""})
        await handle.signal("approve", "big")
        await handle.signal("approve", [1, 2])
        await handle.signal("deny", {"call_id": "nope"})
        await handle.signal("approve", {"call_id": "big", "by": 7})
        await handle.signal(
            "approve",
            {"call_id": "big"},
        )
        await handle.signal("deny", {"call_id": "big"})  # second decision for a decided call
        result = await result_of(handle)
        refused = await handle.query("refused_signals")
    assert result.text == "result: paid 500"
    reasons = [r["reason"] for r in refused]
    assert reasons == [
        "expected one JSON object, got an empty payload",
        'missing "call_id" (waiting: big)',
        'missing "call_id" (waiting: big)',
        "expected a JSON object, got a string",
        "expected a JSON object, got an array",
        "unknown call_id 'nope' (waiting: big)",
        '"by" must be a string',
        "call 'big' was already decided",
    ]
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    events = render(history)
    assert sum(e["type"] == "SignalRefused" for e in events) == 8
    resolved = [e for e in events if e["type"] == "ApprovalResolved"]
    # No `by` in the payload: the log names the sender Temporal recorded.
    assert len(resolved) == 1 and resolved[0]["by"] == client.identity
    assert paid(log) == [{"amount": 5}, {"amount": 500}]


async def test_decide_update_rejects_unknown_and_decided_calls(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "pay.jsonl"
    folder = make_agent(
        tools={"pay": PAY},
        script=[
            {"tool_calls": [{"id": "big", "name": "pay", "args": {"amount": 500}},
                            {"id": "huge", "name": "pay", "args": {"amount": 900}}]},
            "done",
        ],
        env={"required": ["PAY_LOG"]},
    )  # fmt: skip
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await toren_client.start_run(client, folder.name, "pay")
        await wait_for(lambda: _two_pending(client, handle.id))
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await toren_client.approve(client, handle.id, "nope")
        # In the order they started waiting: their approval checks may finish in either order.
        assert re.search(
            r"unknown call_id 'nope' \(waiting: (big, huge|huge, big)\)", str(err.value.cause)
        )
        out = await cli("approve", handle.id, "nope")
        assert out.returncode == 1 and "refused: unknown call_id 'nope'" in out.stderr
        decision = await toren_client.approve(client, handle.id, "big", by="carol")
        assert decision.approved and decision.by == "carol" and decision.via == "update"
        # The run still waits for "huge", so this is a second decision, not a late one.
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await toren_client.deny(client, handle.id, "big")
        assert "call 'big' was already decided" in str(err.value.cause)
        out = await cli("deny", handle.id, "big")
        assert out.returncode == 1 and "already decided" in out.stderr
        await toren_client.deny(client, handle.id, "huge", by="carol", comment="no")
        await result_of(handle)
    assert paid(log) == [{"amount": 500}]


async def _two_pending(client: Client, run_id: str) -> bool:
    return len(await toren_client.pending(client, run_id)) == 2


async def test_current_details_tell_a_person_what_to_paste(
    client: Client, pay_agent: tuple[Path, Path]
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        desc = await handle.describe()
        details = await desc.current_details() if hasattr(desc, "current_details") else None
        if details is None:
            details = await handle.query("__temporal_workflow_metadata")
            details = details.current_details
        assert "`pay` - call `big`" in details
        assert '{"call_id": "big", "by": "your-name", "comment": ""}' in details
        assert "More Actions > Send a Signal" in details
        out = await cli("pending", handle.id)
        assert 'big  pay({"amount": 500})' in out.stdout
        await handle.signal("approve", {"call_id": "big", "by": "dave"})
        await result_of(handle)


async def test_bad_decide_requests_and_misspelled_signals_are_refused_with_the_fix(
    client: Client, pay_agent: tuple[Path, Path]
) -> None:
    folder, log = pay_agent
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await park(client, folder)
        rejected = {}
        for label, args in {
            "none": [],
            "string": ["big"],
            "null": [None],
            "number id": [{"call_id": 1, "approve": True}],
            "no approve": [{"call_id": "big"}],
        }.items():
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update("decide", args=args)
            cause = err.value.cause
            assert isinstance(cause, ApplicationError) and cause.non_retryable, label
            assert cause.type == "InvalidDecision" and '"approve": true' in cause.message, label
            rejected[label] = cause.message.split(";")[0]
        await handle.signal("aprove", {"call_id": "big", "by": "eve"})
        await handle.signal("nudge", "x")
        refused = await wait_for(lambda: _refused_at_least(handle, 2))
        await handle.signal("approve", {"call_id": "big", "by": "eve"})
        await result_of(handle)
    assert rejected == {
        "none": "expected one JSON object, got no argument",
        "string": "expected a JSON object, got a string",
        "null": "expected a JSON object, got null",
        "number id": '"call_id" must be a string, got a number',
        "no approve": 'field "approve" must be true or false',
    }
    assert [r["reason"] for r in refused] == [
        "unknown signal 'aprove'; did you mean 'approve'?",
        "unknown signal 'nudge' (signals: approve, deny, answer)",
    ]
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    shown = [e["reason"] for e in render(history) if e["type"] == "SignalRefused"]
    assert shown == [r["reason"] for r in refused]
    assert paid(log) == [{"amount": 5}, {"amount": 500}]


async def _refused_at_least(handle: WorkflowHandle[Any, Any], n: int) -> list[dict[str, Any]]:
    refused: list[dict[str, Any]] = await handle.query("refused_signals")
    return refused if len(refused) >= n else []


async def test_a_run_started_by_any_client_says_what_it_is_in_the_web_ui(
    pay_agent: tuple[Path, Path], dev_server: Any, client: Client
) -> None:
    folder, log = pay_agent
    plain = await Client.connect(dev_server.address)  # no toren, no static summary
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await plain.start_workflow(
            "AgentRun",
            {"agent": folder.name, "prompt": "Pay the big one\nthen report"},
            id=f"{folder.name}-plain",
            task_queue=folder.name,
        )
        await wait_for(lambda: toren_client.pending(client, handle.id))
        metadata = await handle.query("__temporal_workflow_metadata")
        details = metadata.current_details
        await handle.signal("approve", {"call_id": "big", "by": "dave"})
        await result_of(handle)
    assert details.startswith(f"**{folder.name}**: Pay the big one\n\nstep 1, ")
    assert "`pay` - call `big`" in details


ALWAYS = PAY.replace('approval=lambda args: args["amount"] > 100', 'approval="always"')


@pytest.mark.parametrize("approved", [True, False])
async def test_an_always_gated_tool_waits_for_a_person_even_for_a_tiny_call(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, approved: bool
) -> None:
    assert 'approval="always"' in ALWAYS
    log = tmp_path / "pay.jsonl"
    folder = make_agent(
        tools={"pay": ALWAYS},
        script=[{"tool_calls": [{"id": "tiny", "name": "pay", "args": {"amount": 1}}]},
                "result: {last_tool_result}"],
        env={"required": ["PAY_LOG"]},
    )  # fmt: skip
    async with serve(client, [folder], environ={"PAY_LOG": str(log)}):
        handle = await toren_client.start_run(client, folder.name, "pay a cent")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert [(c.call_id, c.args) for c in calls] == [("tiny", {"amount": 1})]
        assert paid(log) == []  # parked: the handler has not run
        signal = "approve" if approved else "deny"
        await handle.signal(signal, {"call_id": "tiny", "by": "bob", "comment": "checked"})
        result = await result_of(handle)
    if approved:
        assert result.text == "result: paid 1"
        assert paid(log) == [{"amount": 1}]  # exactly once
    else:
        assert result.text == "result: denied by bob: checked"
        assert paid(log) == []
    events = render(await fetch_history(client, handle.id))
    requested = [e for e in events if e["type"] == "ApprovalRequested"]
    assert len(requested) == 1 and requested[0]["callId"] == "tiny"
