"""`toren chat`: a terminal conversation with an agent's thread.

Each line you type is one `send_message`; a tool call that needs a person is asked inline
(`approve refund_order {...}? [y/N]`) and decided through the thread's `decide` update. The
thread outlives the terminal: `toren chat AGENT --thread ID` takes it up again, and
`/close` ends it. Everything goes through the plain Temporal client, like any other client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from toren import client as toren_client
from toren.agent._types import PendingApproval
from toren.cli import _questions
from toren.cli._common import connect, default_by
from toren.client._stream import LiveStream
from toren.client._threads import running_thread
from toren.errors import RunError, TorenError, UndecodablePayloadError

__all__ = ["add_parsers", "chat", "cmd_chat"]

HELP = "Type a message; /close ends the thread, /quit (or Ctrl-D) leaves it running."
POLL_S = 0.3
STREAM_TAIL_S = 3.0
"""How long the answer's streamed tail may trail the answer (or the offset query take)."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`chat`."""
    p = sub.add_parser("chat", help="talk with an agent in a thread (each line a message)")
    p.add_argument("agent", help="agent folder or agent name")
    p.add_argument("--thread", help="thread (workflow) id to resume or create")
    p.add_argument("--user", help="user id of a new thread (default: none)")
    p.set_defaults(handler=cmd_chat)


async def cmd_chat(args: argparse.Namespace) -> int:
    if Path(args.agent).is_dir():
        # Loading the folder imports the agent's tools: the one module that may (`_agents`).
        from toren.cli._agents import load_folder

        agent = load_folder(args.agent).name
    else:
        agent = args.agent
    client = await connect(args)
    thread_id = await _open(client, agent, args.thread, args.user, sys.stdout)
    return await chat(client, agent, thread_id, by=args.user or default_by())


async def _open(
    client: Client, agent: str, thread_id: str | None, user_id: str | None, out: TextIO
) -> str:
    """Take up thread `thread_id` if it runs, else start one; returns its id."""
    if thread_id and await running_thread(client, thread_id):
        history = await toren_client.messages(client, thread_id)
        said = sum(1 for m in history if m.get("role") == "user")
        print(f"resuming thread {thread_id} ({said} messages so far)", file=out)
        return thread_id
    handle = await toren_client.start_thread(client, agent, thread_id=thread_id, user_id=user_id)
    print(f"thread {handle.id}", file=out)
    return handle.id


async def chat(
    client: Client,
    agent: str,
    thread_id: str,
    *,
    by: str,
    read: Callable[[str], str] = input,
    out: TextIO = sys.stdout,
) -> int:
    """Talk with `agent` in its running thread `thread_id`, deciding as `by`; the exit code."""
    print(f"{HELP} Resume later: toren chat {agent} --thread {thread_id}", file=out, flush=True)
    voice = _Voice(agent, out)
    while True:
        try:
            # A call may wait from before (a chat that left, another client's message): it is
            # asked first, or the next line typed would go to the thread as a message.
            if await _answer_waiting(client, thread_id, by, read, out):
                continue
            line = (await asyncio.to_thread(read, "you> ")).strip()
        except (EOFError, _Left):
            line = "/quit"
        if not line:
            continue
        if line == "/quit":
            print(f"the thread goes on; resume: toren chat {agent} --thread {thread_id}", file=out)
            return 0
        if line == "/close":
            result = await toren_client.close_thread(client, thread_id, by=by)
            assert result is not None
            print(f"closed after {result.executions} messages", file=out)
            return 0
        try:
            await _exchange(client, thread_id, line, by, read, out, voice)
        except _Left:
            print(f"the thread goes on; resume: toren chat {agent} --thread {thread_id}", file=out)
            return 0


class _Left(TorenError):  # noqa: N818 - a signal between two functions, never raised to a user
    """Input ended at an approval prompt: the call stays undecided and the chat ends."""


async def _answer_waiting(
    client: Client, thread_id: str, by: str, read: Callable[[str], str], out: TextIO
) -> bool:
    """Ask about calls already waiting, then print the answer of the message they held up."""
    waiting = await _pending(client, thread_id)
    if not waiting:
        return False
    for call in waiting:
        await _ask(client, thread_id, call, by, read, out)
    handle = client.get_workflow_handle(thread_id)
    running = await handle.query("queued_messages")
    if running:
        with contextlib.suppress(WorkflowUpdateFailedError, RPCError):
            outcome = await handle.execute_update(
                "wait_result", str(running[0].get("id")), result_type=dict
            )
            print(f"agent> {outcome.get('text', '')}", file=out, flush=True)
    return True


async def _exchange(
    client: Client,
    thread_id: str,
    line: str,
    by: str,
    read: Callable[[str], str],
    out: TextIO,
    voice: _Voice,
) -> None:
    """Send one message, asking about approvals while it runs, and print the answer.

    The answer's text is printed as it streams (from the thread's stream, read from where it
    stood before the message); what did not stream is printed whole at the end.
    """
    shown = _Shown(out, voice)
    reader = await _stream_answer(client, thread_id, shown)
    sending = asyncio.ensure_future(toren_client.send_message(client, thread_id, line))
    asked: set[str] = set()
    while not sending.done():
        await asyncio.wait([sending], timeout=POLL_S)
        if sending.done():
            break
        for call in await _pending(client, thread_id):
            if call.call_id in asked:
                continue
            asked.add(call.call_id)
            try:
                await _ask(client, thread_id, call, by, read, out)
            except _Left:
                # The message stays in the thread; only this terminal stops waiting on it.
                sending.cancel()
                if reader is not None:
                    reader.cancel()
                raise
        try:  # questions a tool asks a person (`ask_human`, `ctx.ask`)
            await _questions.ask_in_chat(client, thread_id, asked, by, read, out)
        except EOFError:
            print("\n(left unanswered: the question keeps waiting)", file=out, flush=True)
            sending.cancel()
            if reader is not None:
                reader.cancel()
            raise _Left from None
    if reader is not None:
        # The stream's last items may trail the answer by a poll.
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(reader, STREAM_TAIL_S)
        reader.cancel()
    try:
        outcome = sending.result()
    except UndecodablePayloadError as err:
        if not err.accepted:
            raise
        shown.end()
        print(f"(the thread took the message; its answer could not be read: {err})", file=out)
        return
    except (RunError, WorkflowUpdateFailedError) as err:
        cause = getattr(err, "cause", None) or err
        shown.end()
        print(f"(failed: {cause})", file=out, flush=True)
        return
    text = str(outcome.get("text", ""))
    if outcome.get("agent") and outcome["agent"] != voice.current:  # no live `handed_off` read
        shown.end()
        voice.handed(str(outcome["agent"]), None)
    if shown.started and shown.live is not None and shown.live.text == text:
        shown.end()
        return
    shown.end()
    print(f"{voice.prefix()}{text}", file=out, flush=True)


class _Voice:
    """Who answers: `agent>` while the thread's own agent does, `<name>>` once handed off."""

    def __init__(self, home: str, out: TextIO) -> None:
        self.home = self.current = home
        self.out = out

    def prefix(self) -> str:
        return "agent> " if self.current == self.home else f"{self.current}> "

    def handed(self, to: str, reason: str | None) -> None:
        """Say that the conversation went to `to` (`handoffs:`), once."""
        if to != self.current:
            because = f" ({reason})" if reason else ""
            print(f"— handed off to {to}{because} —", file=self.out, flush=True)
            self.current = to


class _Shown:
    """What of the answer was printed as it streamed."""

    def __init__(self, out: TextIO, voice: _Voice) -> None:
        self.out = out
        self.voice = voice
        self.started = False
        self.live: LiveStream | None = None

    def text(self, text: str) -> None:
        if not self.started:
            print(self.voice.prefix(), end="", file=self.out)
            self.started = True
        print(text, end="", file=self.out, flush=True)

    def restart(self) -> None:
        if self.started:
            print("\n(the model was retried; its answer again:)", file=self.out, flush=True)
            self.started = False

    def end(self) -> None:
        if self.started:
            print(file=self.out, flush=True)
            self.started = False


async def _stream_answer(
    client: Client, thread_id: str, shown: _Shown
) -> asyncio.Future[None] | None:
    """Print the next message's text as it streams; `None` when the thread has no stream."""
    try:
        offset = await asyncio.wait_for(
            WorkflowStreamClient.create(client, thread_id).get_offset(), STREAM_TAIL_S
        )
    except Exception:  # a thread from before streams, or a worker restarting
        return None
    live = toren_client.stream(client, thread_id, offset)
    shown.live = live

    async def read() -> None:
        async for event in live:
            if event.type == "text_delta":
                shown.text(str(event.data.get("text") or ""))
            elif event.type == "superseded" and "call_id" not in event.data:
                shown.restart()
            elif event.type == "tool_call_delta" and shown.started:
                shown.end()
            elif event.type == "handed_off":
                shown.end()
                shown.voice.handed(str(event.data.get("to")), event.data.get("reason"))
            elif event.type in ("message_completed", "thread_closed"):
                return

    return asyncio.ensure_future(read())


async def _ask(
    client: Client,
    thread_id: str,
    call: PendingApproval,
    by: str,
    read: Callable[[str], str],
    out: TextIO,
) -> None:
    args = json.dumps(call.args, ensure_ascii=False)
    reason = f" ({call.reason})" if call.reason else ""
    try:
        answer = await asyncio.to_thread(read, f"approve {call.tool} {args}{reason}? [y/N] ")
    except EOFError:
        print(f"\n(left undecided: {call.call_id} keeps waiting)", file=out, flush=True)
        raise _Left from None
    approved = answer.strip().lower() in ("y", "yes")
    try:
        await toren_client.decide(client, thread_id, call.call_id, approved, by=by)
    except WorkflowUpdateFailedError as err:
        print(f"(not recorded: {err.cause})", file=out, flush=True)
        return
    except UndecodablePayloadError as err:
        if not err.accepted:
            raise
        # Recorded: only the run's answer is unreadable here.
        print(f"{'approved' if approved else 'denied'} ({err})", file=out, flush=True)
        return
    print("approved" if approved else "denied", file=out, flush=True)


async def _pending(client: Client, thread_id: str) -> list[PendingApproval]:
    try:
        return await toren_client.pending(client, thread_id)
    except RPCError:
        return []  # a worker is restarting: ask again on the next round
