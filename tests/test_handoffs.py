"""Handoffs in a thread on a real dev server: `transfer_to_<agent>` and the agent after it."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pexpect
import pytest
from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, task_failures
from tests.test_chat import _worker_and_chat
from toren import client as toren_client
from toren.cli import main as toren_main
from toren.client._events import render
from toren.connect import _search_attributes as search_attributes
from toren.worker import serve
from toren.worker.models import ScriptedModel

TRIAGE = Path(__file__).resolve().parent.parent / "examples" / "triage"


async def test_triage_hands_a_billing_question_to_billing_which_keeps_the_thread(
    client: Client,
) -> None:
    async with serve(client, [TRIAGE]):
        thread = await toren_client.start_thread(client, "triage", user_id="alice")
        first = await toren_client.send_message(client, thread.id, "When are you open?")
        second = await toren_client.send_message(
            client, thread.id, "My invoice INV-7 was charged twice"
        )
        third = await toren_client.send_message(client, thread.id, "When will I get it back?")
        conversation = await toren_client.messages(client, thread.id)
        # The thread stays triage's: the inbox, the run list and token scopes go by it.
        described = await thread.describe()
        owner = described.typed_search_attributes.get(search_attributes.AGENT_KEY)
        await toren_client.close_thread(client, thread.id)
    assert owner == "triage"
    assert (first["agent"], first["text"]) == (
        "triage",
        "We are open 9:00 to 17:00, Monday to Friday, and ship within two days.",
    )
    # Billing answers the handed-over message itself, with its own tool.
    assert second["agent"] == "billing"
    assert second["text"].startswith("Billing here. Invoice INV-7 (order A-1002, 35.50)")
    assert (third["agent"], third["text"]) == (
        "billing",
        "Refunds reach your account within five business days.",
    )
    answers = [m.get("agent") for m in conversation if m["role"] == "assistant"]
    assert answers == ["triage", "triage", "billing", "billing", "billing"]
    handoff = next(m for m in conversation if m.get("name") == "transfer_to_billing")
    assert handoff["content"] == "(handed off to billing: a question about invoice INV-7)"
    history = await fetch_history(client, thread.id)
    assert not task_failures(history)
    events = render(history)
    handed = [e for e in events if e["type"] == "HandedOff"]
    assert [(e["from"], e["to"], e["reason"]) for e in handed] == [
        ("triage", "billing", "a question about invoice INV-7")
    ]
    # Billing's tool ran as billing's activity (a local one: a short pure lookup).
    assert [e["tool"] for e in events if e["type"] == "ToolCallCompleted"] == [
        "transfer_to_billing",
        "lookup_invoice",
    ]


async def test_toren_chat_says_when_the_conversation_is_handed_off(
    client: Client, dev_server: DevServer
) -> None:
    env, worker, thread_id, command = _worker_and_chat(TRIAGE, dev_server)
    try:
        chat = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        chat.logfile_read = seen = io.StringIO()
        chat.expect("you> ")
        chat.sendline("When are you open?")
        chat.expect("agent> We are open 9:00 to 17:00")
        chat.expect("you> ")
        chat.sendline("My invoice INV-7 was charged twice")
        chat.expect("— handed off to billing \\(a question about invoice INV-7\\) —")
        chat.expect("billing> Billing here. Invoice INV-7")
        chat.expect("you> ")
        chat.sendline("When will I get it back?")
        chat.expect("billing> Refunds reach your account within five business days.")
        chat.expect("you> ")
        chat.sendline("/close")
        chat.expect("closed after 3 messages")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
        assert seen.getvalue().count("handed off") == 1  # said once, before billing's answer
    finally:
        worker.kill()
        worker.wait()
    assert not task_failures(await fetch_history(client, thread_id))


SCRATCH = """
from toren import define_tool
tool = define_tool(description="Note something.", handler=lambda a, c: "noted")
"""


def _step(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def _call(tool: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": tool, "args": args}


def _users(messages: list[dict[str, Any]]) -> str:
    return "desk saw " + str(sum(1 for m in messages if m.get("role") == "user"))


async def test_an_unknown_transfer_is_an_error_and_the_handed_agent_outlives_continue_as_new(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    desk_name = f"{agent_name}_desk"
    make_agent(
        name=desk_name,
        model="mock/desk",
        tools={"scratch": SCRATCH},
        limits={"continueAsNewAfterEvents": 100},
    )
    front = make_agent(model="mock/front", handoffs={desk_name: {"agent": f"../{desk_name}"}})
    transfer = f"transfer_to_{desk_name}"
    front_model = ScriptedModel(
        [
            _step(_call("transfer_to_nobody", "t0", reason="no such agent")),
            "still front: {last_tool_result}",
            _step(_call(transfer, "t1", reason="the desk knows")),
        ]
    )
    # The script counts every answer of the conversation: the desk's start at the fourth.
    desk_model = ScriptedModel(["-", "-", "-"] + [_step(_call("scratch", "s")), _users] * 12)
    models = {"mock/front": front_model, "mock/desk": desk_model}
    async with serve(client, [front], models=models):
        thread = await toren_client.start_thread(client, front.name)
        unknown = await toren_client.send_message(client, thread.id, "m1")
        handed = await toren_client.send_message(client, thread.id, "m2")
        for n in range(3, 11):
            later = await toren_client.send_message(client, thread.id, f"m{n}")
        histories = await toren_client.histories(client, thread.id)
        await toren_client.close_thread(client, thread.id)
    assert (unknown["agent"], unknown["text"]) == (
        front.name,
        "still front: unknown tool: transfer_to_nobody",
    )
    assert (handed["agent"], handed["text"]) == (desk_name, "desk saw 2")
    assert (later["agent"], later["text"]) == (desk_name, "desk saw 10")
    assert len(histories) >= 2, "the thread should have continued as new at rest"
    # Each later run of the chain loads the desk's spec, never the front's again.
    loaded = [[e["agent"] for e in render(h) if e["type"] == "AgentLoaded"] for h in histories]
    assert loaded[0] == [front.name, desk_name]
    assert all(agents == [desk_name] for agents in loaded[1:]), loaded
    for history in histories:
        assert not task_failures(history)


def test_bad_handoffs_fail_check_naming_the_key(
    make_agent: Callable[..., Path], agent_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = make_agent(name=f"{agent_name}_other")
    folder = make_agent(
        tools={"transfer_to_helper": SCRATCH},
        handoffs={
            "missing": {"agent": "../nowhere"},
            "Bad-Name": {"agent": f"../{other.name}"},
            agent_name: {"agent": "."},
        },
    )
    assert toren_main(["check", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "handoffs: Bad-Name: 'Bad-Name' is not an agent name" in err, err
    assert f"handoffs: {agent_name}: an agent cannot hand a conversation to itself" in err, err
    # The rest once the file itself is right: a colliding tool, then the target folders.
    fixed = make_agent(
        name=f"{agent_name}_fixed",
        tools={"transfer_to_helper": SCRATCH},
        handoffs={
            "missing": {"agent": "../nowhere"},
            "mislabeled": {"agent": f"../{other.name}"},
            "helper": {"agent": f"../{other.name}"},
        },
    )
    assert toren_main(["check", str(fixed)]) == 1
    err = capsys.readouterr().err
    assert "handoffs.helper: its tool 'transfer_to_helper' collides with the agent's own" in err
    (fixed / "tools" / "transfer_to_helper.py").unlink()
    assert toren_main(["check", str(fixed)]) == 1
    err = capsys.readouterr().err
    assert "handoffs.missing.agent: '../nowhere': " in err and "no agent.yaml" in err, err
    for name in ("mislabeled", "helper"):
        assert (
            f"handoffs.{name}.agent: '../{other.name}' holds agent {other.name!r}, not {name!r}"
            in err
        ), err
