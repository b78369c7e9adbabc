"""Approve with edit, and agent.yaml `approvals:` (approvers, remembered grants, expiry rules).

On the dev server, from toren's client and CLI, the plain Temporal client and the `temporal`
CLI, and the HTTP API; the handler's own log says what ran, with which arguments, how often.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.conftest import fetch_history, result_of, wait_for
from toren import client as toren_client
from toren.agent._approval_policy import when_holds
from toren.client._events import render
from toren.errors import ConfigError
from toren.testing import temporal_cli
from toren.web import Token, create_app
from toren.worker import serve
from toren.worker._agent import load_agent
from toren.worker.models import ScriptedModel

REFUND = """
import json
from toren import define_tool

def refund(args, ctx):
    with open(ctx.env["REFUND_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    return f"refunded {args['amount']} on {args['order']}"

tool = define_tool(
    description="Refund an order.",
    input={
        "type": "object",
        "properties": {"order": {"type": "string"}, "amount": {"type": "number", "maximum": 1000}},
        "required": ["order", "amount"],
        "additionalProperties": False,
    },
    effects="external",
    approval="always",
    handler=refund,
)
"""


def refund(id: str, amount: float, order: str = "A-1") -> dict[str, Any]:
    return {
        "tool_calls": [{"id": id, "name": "refund", "args": {"order": order, "amount": amount}}]
    }


def heard(messages: list[dict[str, Any]]) -> str:
    """A final answer repeating the last tool result and every toren note the model was shown."""
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    notes = [
        str(m.get("content"))
        for m in messages
        if m.get("role") == "user" and str(m.get("content", "")).startswith("(toren:")
    ]
    return " || ".join([results[-1] if results else "", *notes])


def refunds(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, list(args), capture_output=True, text=True, timeout=60
    )


async def _longer(query: Any, n: int) -> list[dict[str, Any]] | None:
    found: list[dict[str, Any]] = await query
    return found if len(found) > n else None


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_an_edited_call_runs_with_the_persons_arguments_and_a_misfit_edit_is_refused(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, dev_server: Any
) -> None:
    log = tmp_path / "refunds.jsonl"
    folder = make_agent(tools={"refund": REFUND}, env={"required": ["REFUND_LOG"]})
    model = ScriptedModel([refund("r1", 500), heard])
    async with serve(
        client, [folder], environ={"REFUND_LOG": str(log)}, models={"mock/scripted": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "refund A-1")
        [call] = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert call.args == {"order": "A-1", "amount": 500}

        # The plain Temporal client's signal with an edit that fails the schema: refused,
        # recorded, the call still waits.
        await handle.signal("approve", {"call_id": "r1", "by": "alice", "args": {"amount": 50}})
        refused = await wait_for(lambda: handle.query("refused_signals"))
        assert "order" in refused[0]["reason"] and "still waits" in refused[0]["reason"]
        # toren's client, through the update: the same refusal, as an error naming the field.
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await toren_client.approve(
                client, handle.id, "r1", by="alice", args={"order": "A-1", "amount": 5000}
            )
        assert "amount" in str(err.value.cause) and "1000" in str(err.value.cause)
        # A denial carrying arguments is refused too: only an approval edits a call.
        await handle.signal("deny", {"call_id": "r1", "by": "alice", "args": {"amount": 1}})
        refused = await wait_for(lambda: _longer(handle.query("refused_signals"), 1))
        assert "a denial takes none" in refused[1]["reason"]
        assert [c.call_id for c in await toren_client.pending(client, handle.id)] == ["r1"]
        assert refunds(log) == []
        # The `temporal` CLI approves it with the amount a person chose.
        edit = {"call_id": "r1", "by": "alice", "args": {"order": "A-1", "amount": 200}}
        out = await run_cli(
            temporal_cli(), "workflow", "signal", "--address", dev_server.address,
            "--workflow-id", handle.id, "--name", "approve", "--input", json.dumps(edit),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        result = await result_of(handle)

    assert refunds(log) == [{"order": "A-1", "amount": 200}]  # ran once, with the edit
    answer, note = result.text.split(" || ")
    assert answer == "refunded 200 on A-1"
    assert "alice approved your call r1 to refund with changed arguments" in note
    assert '"amount": {"yours": 500, "ran_with": 200}' in note
    events = render(await fetch_history(client, handle.id))
    [resolved] = of_type(events, "ApprovalResolved")
    assert resolved["edited"] is True and resolved["by"] == "alice"
    assert resolved["argsBefore"] == {"order": "A-1", "amount": 500}
    assert resolved["argsAfter"] == {"order": "A-1", "amount": 200}
    [started] = of_type(events, "ToolCallStarted")
    assert started["args"] == {"order": "A-1", "amount": 200}
    refusals = of_type(events, "SignalRefused")
    assert refusals and "order" in refusals[0]["reason"]


def test_toren_approve_args_must_be_a_json_object() -> None:
    for bad, says in (("{amount: 5}", "not valid JSON"), ("[1, 2]", "JSON object")):
        out = subprocess.run(
            [sys.executable, "-m", "toren.cli", "approve", "run-1", "c1", "--args", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2, out
        assert says in out.stderr and "--args" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


POLICY = {
    "approvers": ["alice", "bob"],
    "rules": [
        {
            "name": "small-refunds",
            "tool": "refund",
            "when": {"amount": {"lt": 200}},
            "approvers": ["alice"],
            "remember": "thread",
        },
    ],
}


async def test_a_remembered_grant_lets_a_threads_later_small_refund_through(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "refunds.jsonl"
    folder = make_agent(
        tools={"refund": REFUND}, env={"required": ["REFUND_LOG"]}, approvals=POLICY
    )
    script = [refund("r1", 150), heard, refund("r2", 120), heard, refund("r3", 500), heard]
    app = create_app(
        client,
        tokens=[
            Token("plain-token"),
            Token("carol-token", name="carol"),
            Token("bob-token", name="bob"),
        ],
    )
    async with serve(
        client,
        [folder],
        environ={"REFUND_LOG": str(log)},
        models={"mock/scripted": ScriptedModel(script)},
    ):
        thread = await toren_client.start_thread(client, folder.name, user_id="u1")
        first = asyncio.create_task(toren_client.send_message(client, thread.id, "refund 150"))
        [call] = await wait_for(lambda: toren_client.pending(client, thread.id))
        assert call.rule == "small-refunds" and call.approvers == ["alice"]
        # bob is an approver of the agent, but not of this rule's calls.
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await toren_client.approve(client, thread.id, "r1", by="bob")
        assert "'bob' may not decide call 'r1': its approvers are alice" in str(err.value.cause)
        await toren_client.approve(client, thread.id, "r1", by="alice")
        assert (await first)["text"].startswith("refunded 150")

        # The grant holds for the rest of the thread: no person is asked for 120.
        second = await asyncio.wait_for(
            toren_client.send_message(client, thread.id, "refund 120"), timeout=60
        )
        assert second["text"].startswith("refunded 120")

        # 500 matches no rule: the agent's approvers decide, and over HTTP a token's name is who.
        third = asyncio.create_task(toren_client.send_message(client, thread.id, "refund 500"))
        [big] = await wait_for(lambda: toren_client.pending(client, thread.id))
        assert big.call_id == "r3" and big.rule == "" and big.approvers == ["alice", "bob"]
        transport = httpx.ASGITransport(app=app)

        async def decide(token: str, **body: Any) -> httpx.Response:
            async with httpx.AsyncClient(transport=transport, base_url="http://toren") as http:
                return await http.post(
                    f"/v1/threads/{thread.id}/decisions",
                    json={"call_id": "r3", "approve": True, **body},
                    headers={"Authorization": f"Bearer {token}"},
                )

        not_approver = await decide("carol-token")
        assert not_approver.status_code == 409
        assert "'carol' may not decide call 'r3'" in not_approver.json()["error"]
        forged = await decide("carol-token", by="bob")
        assert forged.status_code == 403 and "decides as 'carol'" in forged.json()["error"]
        unnamed = await decide("plain-token", by="bob")
        assert unnamed.status_code == 403 and "<name>@<token>" in unnamed.json()["error"]
        misfit = await decide("bob-token", args={"order": "A-1", "amount": "400"})
        assert misfit.status_code == 409 and "amount" in misfit.json()["error"]
        approved = await decide("bob-token", args={"order": "A-1", "amount": 400})
        assert approved.status_code == 200, approved.text
        assert approved.json()["by"] == "bob"
        assert approved.json()["args"] == {"order": "A-1", "amount": 400}
        assert (await third)["text"].startswith("refunded 400")
        await toren_client.close_thread(client, thread.id, by="u1")

    assert [r["amount"] for r in refunds(log)] == [150, 120, 400]
    events = render(await fetch_history(client, thread.id))
    resolved = of_type(events, "ApprovalResolved")
    assert [(e["callId"], e["by"], e["via"]) for e in resolved] == [
        ("r1", "alice", "update"),
        ("r2", "toren", "policy"),
        ("r3", "bob", "update"),
    ]
    assert resolved[1]["rule"] == "small-refunds" and resolved[1]["grantedBy"] == "alice"
    requested = of_type(events, "ApprovalRequested")
    assert [e["callId"] for e in requested] == ["r1", "r3"]
    assert requested[0]["rule"] == "small-refunds"


async def test_a_rule_decides_an_expired_approval_and_says_so(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "refunds.jsonl"
    policy = {
        "rules": [
            {"name": "tiny", "tool": "refund", "when": {"amount": {"le": 5}},
             "auto": "approve", "timeoutMin": 0.02},
            {"name": "other", "tool": "refund", "timeoutMin": 0.02},
        ]
    }  # fmt: skip
    folder = make_agent(
        tools={"refund": REFUND}, env={"required": ["REFUND_LOG"]}, approvals=policy
    )
    calls = {"tool_calls": [
        {"id": "t1", "name": "refund", "args": {"order": "A-1", "amount": 5}},
        {"id": "t2", "name": "refund", "args": {"order": "A-2", "amount": 50}},
    ]}  # fmt: skip
    model = ScriptedModel([calls, heard])
    async with serve(
        client, [folder], environ={"REFUND_LOG": str(log)}, models={"mock/scripted": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "refund both")
        await result_of(handle)
    assert refunds(log) == [{"order": "A-1", "amount": 5}]
    events = render(await fetch_history(client, handle.id))
    resolved = {e["callId"]: e for e in of_type(events, "ApprovalResolved")}
    assert resolved["t1"]["approved"] is True and resolved["t1"]["rule"] == "tiny"
    assert resolved["t1"]["via"] == "expiry"
    assert resolved["t2"]["approved"] is False and "rule other: deny" in resolved["t2"]["comment"]


def test_rules_that_cannot_apply_are_refused_at_load(make_agent: Callable[..., Path]) -> None:
    never = REFUND.replace('approval="always"', 'approval="never"')
    folder = make_agent(
        tools={"refund": REFUND, "lookup": never.replace("Refund an order.", "Look up.")},
        approvals={
            "rules": [
                {"name": "a", "tool": "refnud"},
                {"name": "b", "tool": "lookup"},
            ]
        },
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "approvals.rules[0] (a): tool 'refnud' is not one of the agent's tools" in text
    assert "approvals.rules[1] (b): tool 'lookup' is never gated" in text
    for bad, says in (
        ({"rules": [{"name": "a", "tool": "refund", "when": {"amount": {"under": 5}}}]}, "under"),
        ({"rules": [{"name": "a", "tool": "refund"}, {"name": "a", "tool": "refund"}]}, "unique"),
        ({"rules": [{"name": "a", "tool": "refund", "remember": "forever"}]}, "remember"),
        ({"approvers": ["al ice"]}, "approvers"),
    ):
        folder = make_agent(tools={"refund": REFUND}, approvals=bad)
        with pytest.raises(ConfigError) as err:
            load_agent(folder)
        assert says in str(err.value), (bad, str(err.value))


def test_when_conditions() -> None:
    args = {"amount": 150, "order": {"country": "NL"}, "flag": True}
    assert when_holds({"amount": {"lt": 200, "ge": 100}}, args)
    assert not when_holds({"amount": {"lt": 100}}, args)
    assert when_holds({"order.country": {"in": ["NL", "BE"]}}, args)
    assert not when_holds({"order.country": "DE"}, args)
    assert not when_holds({"missing": {"lt": 5}}, args)  # a missing argument: no match
    assert not when_holds({"order.country": {"lt": 5}}, args)  # a string against a number
    assert not when_holds({"flag": {"lt": 2}}, args)  # booleans are not numbers here
    assert when_holds({}, args)


async def test_an_edit_into_another_rules_reach_waits_for_that_rules_approvers(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    log = tmp_path / "refunds.jsonl"
    policy = {
        "approvers": ["bob"],
        "rules": [
            {"name": "small", "tool": "refund", "when": {"amount": {"lt": 200}},
             "approvers": ["alice"]},
        ],
    }  # fmt: skip
    folder = make_agent(
        tools={"refund": REFUND}, env={"required": ["REFUND_LOG"]}, approvals=policy
    )
    model = ScriptedModel([refund("r1", 150), heard])
    async with serve(
        client, [folder], environ={"REFUND_LOG": str(log)}, models={"mock/scripted": model}
    ):
        handle = await toren_client.start_run(client, folder.name, "refund A-1")
        [call] = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert call.approvers == ["alice"]
        # alice may approve small refunds; she edits this one to 900, which only bob may.
        await toren_client.approve(
            client, handle.id, "r1", by="alice", args={"order": "A-1", "amount": 900}
        )

        async def waits_for_bob() -> list[Any] | None:
            calls = await toren_client.pending(client, handle.id)
            return calls if calls and calls[0].approvers == ["bob"] else None

        [again] = await wait_for(waits_for_bob)
        assert again.args == {"order": "A-1", "amount": 900}
        assert "alice changed its arguments" in again.reason
        assert refunds(log) == []  # nothing ran on alice's word alone
        with pytest.raises(WorkflowUpdateFailedError):
            await toren_client.approve(client, handle.id, "r1", by="alice")
        await toren_client.approve(client, handle.id, "r1", by="bob")
        result = await result_of(handle)
    assert refunds(log) == [{"order": "A-1", "amount": 900}]
    assert result.text.startswith("refunded 900")
    events = render(await fetch_history(client, handle.id))
    assert [(e["by"], e.get("edited")) for e in of_type(events, "ApprovalResolved")] == [
        ("alice", True),
        ("bob", None),
    ]
    assert len(of_type(events, "ApprovalRequested")) == 2
    assert not of_type(events, "SignalRefused")
