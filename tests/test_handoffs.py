"""Handoffs in a thread on a real dev server: `transfer_to_<agent>` and the agent after it."""

from __future__ import annotations

import io
from pathlib import Path

import pexpect
from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, task_failures
from tests.test_chat import _worker_and_chat
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve

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
        await toren_client.close_thread(client, thread.id)
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
