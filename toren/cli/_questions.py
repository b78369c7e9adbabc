"""`toren answer RUN QUESTION_ID TEXT`: answer a question a run asks a person.

The answer goes to the run as its `answer` update, so a refusal (an unknown or answered
question, a text that is not one of its choices) is printed with the run's reason. `toren
pending` (the inbox) lists waiting questions under the waiting calls (`questions_inbox`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import TextIO

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from toren import client as toren_client
from toren.cli._common import connect, default_by
from toren.cli._watch import toren_command
from toren.errors import UndecodablePayloadError

__all__ = ["add_parsers", "ask_in_chat", "cmd_answer", "questions_inbox"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`answer`."""
    p = sub.add_parser("answer", help="answer a question a run asks (ask_human, ctx.ask)")
    p.add_argument("run_id")
    p.add_argument("question_id", help="from `toren pending RUN` or `toren pending`")
    p.add_argument("text", help="the answer (one of the question's choices, if it has any)")
    p.add_argument("--by", help="who answers (default: your user name)")
    p.set_defaults(handler=cmd_answer)


async def cmd_answer(args: argparse.Namespace) -> int:
    client = await connect(args)
    try:
        answer = await toren_client.answer(
            client, args.run_id, args.question_id, args.text, by=args.by or default_by()
        )
    except WorkflowUpdateFailedError as err:
        print(f"refused: {getattr(err.cause, 'message', None) or err}", file=sys.stderr)
        return 1
    except UndecodablePayloadError as err:
        if not err.accepted:
            raise
        print(f"{args.question_id}: answer accepted by run {args.run_id}")
        print(f"toren: the run's reply could not be read: {err}", file=sys.stderr)
        return 0
    print(f"{answer.question_id} answered by {answer.by}: {answer.text}")
    return 0


async def questions_inbox(client: Client, run_id: str | None, agent: str | None) -> list[str]:
    """Lines for the waiting questions: of run `run_id`, or (None) of the namespace."""
    if run_id is not None:
        try:
            found = await toren_client.pending_questions(client, run_id)
        except UndecodablePayloadError:
            raise
        except Exception:  # a worker of a release that asks no questions
            return []
        items = [(run_id, q) for q in found]
    else:
        items = [(i.run_id, i.question) for i in await toren_client.question_inbox(client, agent)]
    lines = []
    for run, q in items:
        choices = f"  choices: {', '.join(q.choices)}" if q.choices else ""
        lines.append(f"{run}  {q.question_id}  asks: {json.dumps(q.question)}{choices}")
        example = json.dumps(q.choices[0] if q.choices else "<answer>")
        lines.append(f"    {toren_command(f'answer {run} {q.question_id} {example}')}")
    return lines


async def ask_in_chat(
    client: Client,
    thread_id: str,
    asked: set[str],
    by: str,
    read: Callable[[str], str],
    out: TextIO,
) -> None:
    """`toren chat`: ask the person at the terminal each new question the thread waits on.

    Raises:
        EOFError: input ended at the prompt (the question keeps waiting).
    """
    try:
        questions = await toren_client.pending_questions(client, thread_id)
    except RPCError:
        return  # a worker is restarting: ask again on the next round
    for q in questions:
        if q.question_id in asked:
            continue
        asked.add(q.question_id)
        choices = f" [{' / '.join(q.choices)}]" if q.choices else ""
        text = ""
        while not text:
            text = (await asyncio.to_thread(read, f"{q.tool} asks: {q.question}{choices} ")).strip()
        try:
            answer = await toren_client.answer(client, thread_id, q.question_id, text, by=by)
        except WorkflowUpdateFailedError as err:
            print(f"(not recorded: {getattr(err.cause, 'message', None) or err})", file=out)
            asked.discard(q.question_id)  # asked again on the next round
            continue
        print(f"(answered: {answer.text})", file=out, flush=True)
