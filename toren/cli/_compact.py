"""`toren compact THREAD [--instructions TEXT]`: fold a resting thread's older turns now.

The thread's `compact` update runs the summarising model call and answers with what it did;
the conversation itself stays whole (`toren chat` scroll-back, the `messages` query).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from temporalio.client import WorkflowUpdateFailedError

from toren.cli._common import connect

__all__ = ["add_parsers", "cmd_compact"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`compact`."""
    p = sub.add_parser("compact", help="summarise a resting thread's older turns for the model")
    p.add_argument("thread_id")
    p.add_argument("--instructions", help="what the summary should keep (instead of toren's)")
    p.set_defaults(handler=cmd_compact)


async def cmd_compact(args: argparse.Namespace) -> int:
    """Run the thread's `compact` update and print what it folded."""
    client = await connect(args)
    handle = client.get_workflow_handle(args.thread_id)
    kind = (await handle.describe()).workflow_type
    if kind != "AgentThread":
        print(
            f"{args.thread_id} is an {kind}, not a thread: only a thread compacts by hand "
            "(a run compacts by itself when its prompt nears the window)",
            file=sys.stderr,
        )
        return 1
    body = {"instructions": args.instructions} if args.instructions else {}
    try:
        outcome: dict[str, Any] = await handle.execute_update("compact", body)
    except WorkflowUpdateFailedError as err:
        print(f"refused: {getattr(err.cause, 'message', None) or err}", file=sys.stderr)
        return 1
    if not outcome.get("compacted"):
        print(f"not compacted: {outcome.get('reason')}")
        return 0
    print(
        f"compacted: {outcome['messages_folded']} messages folded, "
        f"{outcome['elided']} tool results elided, about {outcome['tokens_before']} -> "
        f"{outcome['tokens_after']} tokens"
    )
    if outcome.get("summary"):
        print(json.dumps(outcome["summary"], ensure_ascii=False))
    return 0
