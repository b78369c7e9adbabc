"""examples/concierge, run as its README says: a `toren worker` and two messages in one thread
through `toren chat`. The first message stores the guest (`remember_guest`), searches through
the shipped MCP server and books after an inline approval; the second reads the guest back
from the thread's state and answers with it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pexpect
from temporalio.client import Client

from tests.conftest import ROOT, DevServer, fetch_history, task_failures
from toren.client._events import render

FIRST = "Hi, I'm Ada. We're four, vegetarian. A table for Friday at 19:30?"
SECOND = "Somewhere for lunch on Saturday?"


async def test_concierge_remembers_the_guest_books_through_mcp_after_an_inline_approval(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    ledger = tmp_path / "bookings.jsonl"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        # agent.yaml runs the server with the `python` on PATH: this venv's, which has `mcp`.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "CONCIERGE_BOOKINGS": str(ledger),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", "examples/concierge"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    thread_id = f"concierge-{uuid.uuid4().hex[:8]}"
    command = ["-m", "toren.cli", "chat", "examples/concierge", "--thread", thread_id,
               "--user", "ada"]  # fmt: skip
    try:
        chat = pexpect.spawn(sys.executable, command, env=env, cwd=str(ROOT),
                             encoding="utf-8", timeout=60)  # fmt: skip
        chat.logfile_read = sys.stdout
        chat.expect(f"thread {thread_id}")
        chat.expect("you> ")
        chat.sendline(FIRST)
        chat.expect(
            r'approve dining__book_table \{"restaurant_id": "green-fork", "day": "Friday", '
            r'"time": "19:30", "party_size": 4, "name": "Ada"\} '
            r"\(approval: always\)\? \[y/N\] "
        )
        assert not ledger.exists()  # nothing booked before the person says yes
        chat.sendline("y")
        chat.expect("approved")
        chat.expect(r"agent> Nice to meet you, Ada. Done: booked The Green Fork for 4 on Friday at 19:30 under Ada, "
                    r"confirmation (CF-[0-9A-F]{6})\.")  # fmt: skip
        confirmation = chat.match.group(1)
        chat.expect("you> ")

        chat.sendline(SECOND)
        chat.expect(r"Welcome back \(name: Ada, diet: vegetarian, party size: 4\)\.")
        chat.expect("For Saturday lunch, vegetarian, for four:")
        chat.expect("you> ")
        shown = chat.before
        assert "green-fork: The Green Fork" in shown and "saffron-house: Saffron House" in shown
        assert "nonna-rosa" not in shown  # dinner only: the server really filtered
        state = await client.get_workflow_handle(thread_id).query("state")
        assert state == {"guest": {"name": "Ada", "diet": "vegetarian", "party_size": 4}}
        chat.sendline("/close")
        chat.expect("closed after 2 messages")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
    finally:
        worker.terminate()
        worker.wait(30)

    # The booking reached the MCP server once, with the confirmation the chat showed.
    booked = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(b["restaurant_id"], b["name"], b["confirmation"]) for b in booked] == [
        ("green-fork", "Ada", confirmation)
    ]
    history = await fetch_history(client, thread_id)
    assert not task_failures(history)
    done = {e["tool"]: e["result"] for e in render(history) if e["type"] == "ToolCallCompleted"}
    # The second message's turn read the guest from state, not from the model's arguments.
    assert done["recall_guest"] == "name: Ada, diet: vegetarian, party size: 4"
    assert re.search(r"booked The Green Fork .* confirmation CF-", done["dining__book_table"])
    assert any(e["type"] == "ApprovalResolved" for e in render(history))
