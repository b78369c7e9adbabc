"""`toren chat` driven through a pseudo-terminal: two turns, an approval asked inline, resume."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pexpect
from temporalio.client import Client

from tests.conftest import DevServer, fetch_history, task_failures

GATED = """
from toren import define_tool
tool = define_tool(
    description="Refund an order.",
    input={"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
    approval="always",
    handler=lambda a, c: "refunded " + a["order"],
)
"""


def _worker_and_chat(
    folder: Path, dev_server: DevServer
) -> tuple[dict[str, str], subprocess.Popen[bytes], str, list[str]]:
    """A `toren worker` process for `folder`, and the `toren chat` command for a new thread."""
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", str(folder)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    thread_id = f"chat-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "toren.cli", "chat", str(folder), "--thread", thread_id]
    return env, worker, thread_id, command


async def test_chat_two_turns_an_inline_approval_and_a_resume(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(
        tools={"refund": GATED},
        script=[
            "hello back",
            {"tool_calls": [{"name": "refund", "id": "r1", "args": {"order": "A-1"}}]},
            "done: {last_tool_result}",
        ],
    )
    env, worker, thread_id, command = _worker_and_chat(folder, dev_server)
    try:
        chat = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        chat.expect(f"thread {thread_id}")
        chat.expect("you> ")
        chat.sendline("hi there")
        chat.expect("agent> hello back")
        chat.expect("you> ")
        chat.sendline("refund A-1 please")
        chat.expect(r'approve refund \{"order": "A-1"\}.*\? \[y/N\] ')
        chat.sendline("y")
        chat.expect("approved")
        chat.expect("agent> done: refunded A-1")
        chat.expect("you> ")
        chat.sendline("/quit")
        chat.expect(f"resume: toren chat .* --thread {thread_id}")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0

        again = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        again.expect(rf"resuming thread {thread_id} \(2 messages so far\)")
        again.expect("you> ")
        again.sendline("/close")
        again.expect("closed after 2 messages")
        again.expect(pexpect.EOF)
        again.close()
        assert again.exitstatus == 0
    finally:
        worker.kill()
        worker.wait()
    history = await fetch_history(client, thread_id)
    assert not task_failures(history)


async def test_a_call_left_waiting_is_asked_first_when_the_chat_resumes(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    # Input ending at an approval prompt leaves the call undecided (no traceback); resuming
    # asks it before the `you>` prompt, so the `y` typed next decides it and is no message.
    folder = make_agent(
        tools={"refund": GATED},
        script=[
            {"tool_calls": [{"name": "refund", "id": "r1", "args": {"order": "A-1"}}]},
            "done: {last_tool_result}",
        ],
    )
    env, worker, thread_id, command = _worker_and_chat(folder, dev_server)
    try:
        chat = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        chat.expect("you> ")
        chat.sendline("refund A-1 please")
        chat.expect(r"approve refund .*\? \[y/N\] ")
        chat.sendeof()
        chat.expect("left undecided: r1 keeps waiting")
        chat.expect(f"resume: toren chat .* --thread {thread_id}")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0, chat.before
        again = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        again.expect(rf"resuming thread {thread_id}")
        again.expect(r"approve refund .*\? \[y/N\] ")
        again.sendline("y")
        again.expect("approved")
        again.expect("agent> done: refunded A-1")
        again.expect("you> ")
        again.sendline("/close")
        again.expect("closed after 1 messages")
        again.expect(pexpect.EOF)
        again.close()
        assert again.exitstatus == 0
    finally:
        worker.kill()
        worker.wait()
    history = await fetch_history(client, thread_id)
    assert not task_failures(history)
    received = [
        e
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    names = [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
             for e in received]  # fmt: skip
    assert names.count("send_message") == 1  # the `y` was no message


async def test_chat_asks_a_tools_question_inline_and_a_wrong_choice_is_asked_again(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(
        builtin_tools=["ask_human"],
        script=[
            {"tool_calls": [{"name": "ask_human", "id": "q1",
                             "args": {"question": "Which size?", "choices": ["S", "M"]}}]},
            "ordered size {last_tool_result}",
        ],
    )  # fmt: skip
    env, worker, thread_id, command = _worker_and_chat(folder, dev_server)
    try:
        chat = pexpect.spawn(command[0], command[1:], env=env, encoding="utf-8", timeout=60)
        chat.expect("you> ")
        chat.sendline("order a shirt")
        chat.expect(r"ask_human asks: Which size\? \[S / M\] ")
        chat.sendline("XL")  # not a choice: refused by the run, asked again
        chat.expect(r"not recorded: [^\n]*one of[^\n]*")
        chat.expect(r"ask_human asks: Which size\? \[S / M\] ")
        chat.sendline("M")
        chat.expect(r"\(answered: M\)")
        chat.expect("agent> ordered size .*M")
        chat.expect("you> ")
        chat.sendline("/close")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert not task_failures(await fetch_history(client, thread_id))
