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
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pexpect
import pytest
from temporalio.client import Client

from bench.faults.fake_openai import FakeOpenAI
from tests.conftest import ROOT, DevServer, fetch_history, result_of, task_failures
from toren import client as toren_client
from toren.client._events import render

FIRST = "Hi, I'm Ada. We're four, vegetarian. A table for Friday at 19:30?"
SECOND = "Somewhere for lunch on Saturday?"


def worker_env(dev_server: DevServer, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        # agent.yaml runs the server with the `python` on PATH: this venv's, which has `mcp`.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **more,
    }


async def test_concierge_remembers_the_guest_books_through_mcp_after_an_inline_approval(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    ledger = tmp_path / "bookings.jsonl"
    env = worker_env(dev_server, CONCIERGE_BOOKINGS=str(ledger))
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", "examples/concierge"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    thread_id = f"concierge-{uuid.uuid4().hex[:8]}"
    command = ["-m", "toren.cli", "chat", "examples/concierge", "--thread", thread_id,
               "--user", "ada"]  # fmt: skip
    try:
        chat = pexpect.spawn(sys.executable, command, env=env, cwd=str(ROOT),
                             encoding="utf-8", timeout=30)  # fmt: skip
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


@dataclass
class FollowsInstructions(FakeOpenAI):
    """An OpenAI-compatible server that answers as a model following instructions.md: recall
    first, remember a name it is told, then answer with what the tools said."""

    plans: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, http: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        self.bodies.append(body)
        last = body["messages"][-1]
        called = {c["id"]: c["function"]["name"] for m in body["messages"]
                  for c in m.get("tool_calls") or []}  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if last["role"] == "user":
            message["tool_calls"] = [_call("recall_guest", {})]
        elif called[last["tool_call_id"]] == "recall_guest" and last["content"] == "nothing yet":
            message["tool_calls"] = [_call("remember_guest", {"name": "Bo"})]
        else:
            message["content"] = f"As I have it: {last['content']}"
        data = json.dumps(
            {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "message": message,
                          "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
             "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
        ).encode()  # fmt: skip
        http.send_response(200)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(data)))
        http.end_headers()
        http.wfile.write(data)


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    call_id = f"call_{uuid.uuid4().hex[:8]}"
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


@pytest.fixture
def model() -> Iterator[FollowsInstructions]:
    server = FollowsInstructions().start()
    yield server
    server.stop()


async def test_with_a_model_flag_the_model_sees_the_instructions_and_every_tool(
    client: Client, dev_server: DevServer, model: FollowsInstructions
) -> None:
    # `toren worker examples/concierge --model openai/gpt-4o-mini` as the README says, with
    # OPENAI_BASE_URL at a server standing in for the provider.
    env = worker_env(dev_server, OPENAI_API_KEY="sk-fake", OPENAI_BASE_URL=model.base_url)
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", "examples/concierge",
         "--model", "openai/gpt-4o-mini"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        thread = await toren_client.start_thread(client, "concierge", user_id="bo")
        first = await result_of(toren_client.send_message(client, thread.id, "I'm Bo."))
        second = await result_of(toren_client.send_message(client, thread.id, "Who am I?"))
        await toren_client.close_thread(client, thread.id, by="bo")
    finally:
        worker.terminate()
        worker.wait(30)
    assert first["text"] == "As I have it: remembered name: Bo"
    assert second["text"] == "As I have it: name: Bo"  # read back from the thread's state
    request = model.bodies[0]
    assert request["model"] == "gpt-4o-mini"
    assert "concierge of a small city hotel" in request["messages"][0]["content"]
    assert sorted(t["function"]["name"] for t in request["tools"]) == [
        "dining__book_table", "dining__find_restaurants", "recall_guest", "remember_guest",
    ]  # fmt: skip
