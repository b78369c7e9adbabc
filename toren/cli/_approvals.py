"""`toren pending`, `toren approve` and `toren deny`: the calls waiting for a person, decided.

`toren pending RUN` lists one run's waiting calls; with no RUN it is the inbox: every running
run's waiting calls in the namespace, found through toren's search attributes (`toren setup`).
A decision goes to the run as its `approve` or `deny` update, so the run's refusal (an unknown
call, one decided already) is printed instead of being lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError

from toren import client as toren_client
from toren.agent._types import PendingApproval
from toren.cli import _questions
from toren.cli._common import connect, default_by
from toren.cli._watch import toren_command
from toren.errors import UndecodablePayloadError, UsageError

__all__ = ["add_parsers", "cmd_approve", "cmd_deny", "cmd_pending"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`approve`, `deny` and `pending`."""
    for name, help_, handler in (
        ("approve", "approve a waiting call", cmd_approve),
        ("deny", "deny a waiting call", cmd_deny),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("run_id")
        p.add_argument("call_id")
        p.add_argument("--by", help="who decides (default: your user name)")
        p.add_argument("--comment", help="why (the model sees it on a denial)")
        if name == "approve":
            p.add_argument(
                "--args",
                dest="call_args",
                metavar="JSON",
                help="run the call with these arguments instead (a JSON object; the whole "
                "arguments, checked against the tool's schema by the run)",
            )
        p.set_defaults(handler=handler)

    p = sub.add_parser(
        "pending", help="calls waiting for a decision: of one run, or (no RUN) the inbox"
    )
    p.add_argument("run_id", nargs="?")
    p.add_argument("--agent", help="with no RUN: only this agent's runs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_pending)


async def cmd_approve(args: argparse.Namespace) -> int:
    return await _decide(args, True)


async def cmd_deny(args: argparse.Namespace) -> int:
    return await _decide(args, False)


async def cmd_pending(args: argparse.Namespace) -> int:
    client = await connect(args)
    if not args.run_id:
        return await _inbox(client, args)
    calls = await toren_client.pending(client, args.run_id)
    if args.json:
        print(json.dumps([c.__dict__ for c in calls], indent=2))
        return 0
    if not calls:
        print(f"no call of {args.run_id} is waiting for approval")
    for c in calls:
        print(
            f"{c.call_id}  {c.tool}({json.dumps(c.args)})  since {c.requested_at}  [{c.reason}]"
            + _policy(c)
        )
        if c.path:  # waiting in an agent tool's child; decided through this run all the same
            print(f"    in {' → '.join(c.path)} ({c.run_id or args.run_id})")
    for line in await _questions.questions_inbox(client, args.run_id, None):  # ask_human, ctx.ask
        print(line)
    return 0


async def _inbox(client: Client, args: argparse.Namespace) -> int:
    items = await toren_client.inbox(client, agent=args.agent)
    if args.json:
        rows = [
            {
                "run_id": i.run_id,
                "agent": i.agent,
                "age_s": i.age.total_seconds(),
                **i.call.__dict__,
            }
            for i in items
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not items:
        print(f"no call is waiting for approval in namespace {client.namespace!r}")
    for i in items:
        age = _age(i.age.total_seconds())
        print(
            f"{i.run_id}  {i.call.call_id}  {i.call.tool}({json.dumps(i.call.args)})  {age} ago"
            + _policy(i.call)
        )
        if i.call.path:  # a call inside an agent tool's child run
            print(f"    in {' → '.join(i.call.path)}")
        print(f"    {toren_command(f'approve {i.run_id} {i.call.call_id}')}")
    for line in await _questions.questions_inbox(client, None, args.agent):  # ask_human, ctx.ask
        print(line)
    return 0


def _policy(call: PendingApproval) -> str:
    """`  rule small-refunds, approvers alice`: what agent.yaml `approvals:` says of the call."""
    said = ([f"rule {call.rule}"] if call.rule else []) + (
        [f"approvers {', '.join(call.approvers)}"] if call.approvers is not None else []
    )
    return f"  ({'; '.join(said)})" if said else ""


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


async def _decide(args: argparse.Namespace, approved: bool) -> int:
    edited = _edited_args(getattr(args, "call_args", None))
    client = await connect(args)
    try:
        decision = await toren_client.decide(
            client,
            args.run_id,
            args.call_id,
            approved,
            by=args.by or default_by(),
            comment=args.comment or "",
            args=edited,
        )
    except WorkflowUpdateFailedError as err:
        print(f"refused: {getattr(err.cause, 'message', None) or err}", file=sys.stderr)
        return 1
    except UndecodablePayloadError as err:
        if not err.accepted:
            raise
        # It took effect: saying "failed" could get the call approved twice elsewhere.
        word = "approval" if approved else "denial"
        print(f"{args.call_id}: {word} accepted by run {args.run_id}")
        print(f"toren: the run's answer could not be read: {err}", file=sys.stderr)
        return 0
    word = "approved" if decision.approved else "denied"
    edited_note = " with the arguments you gave" if decision.args is not None else ""
    print(f"{decision.call_id} {word} by {decision.by}{edited_note}")
    return 0


def _edited_args(text: str | None) -> dict[str, Any] | None:
    """`--args`: a JSON object, or a `UsageError` saying what is wrong with it."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as err:
        raise UsageError(  # noqa: B904 (the JSON error is in the message)
            f"--args is not valid JSON ({err}); give an object like '{{\"amount\": 50}}'"
        )
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object of the tool's arguments, got {text[:80]!r}")
    return value
