"""`toren run`, `toren fork`, `toren events` and `toren replay`: starting, following, reading back.

`toren run` follows a run across continue-as-new to the run that closes it, says what it waits
for (`toren.cli._watch`) and prints the model's text as it streams (`toren.cli._live_print`).
It exits 0 when the run completed, 1 when it failed, timed out, was cancelled or terminated,
130 on Ctrl-C (the run goes on; `after_ctrl_c` says how to follow it again). The Web UI link it
prints comes from TOREN_UI_URL (or TEMPORAL_UI_URL), e.g. `http://localhost:8233`; unset, it is
printed only for the dev server's default localhost:7233.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from toren import client as toren_client
from toren.cli._common import codec_settings, connect
from toren.cli._live_print import LivePrinter
from toren.cli._watch import pasteable, toren_command, watch
from toren.client._events import EventStream, format_event
from toren.client._nested import nested_events
from toren.client._readable import ensure_readable
from toren.errors import UsageError

__all__ = [
    "add_parsers",
    "after_ctrl_c",
    "cmd_events",
    "cmd_fork",
    "cmd_replay",
    "cmd_run",
    "follow",
]

_UNSUCCESSFUL = ("RunFailed", "RunTimedOut", "RunCanceled", "RunTerminated")

_started_run: list[str] = []
"""The run `toren run` started, for the word it says on Ctrl-C."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`run`, `events` and `replay`."""
    p = sub.add_parser("run", help="start a run and follow it")
    p.add_argument("agent_dir")
    p.add_argument("prompt")
    p.add_argument("--id", help="run (workflow) id; default <agent>-<random>")
    p.add_argument("--arg", action="append", help="invocation argument KEY=VALUE (JSON value)")
    p.add_argument("--attach", action="append", help="attachment id (see `toren attach`)")
    p.add_argument("--no-wait", action="store_true", help="print the run id and return")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser(
        "fork", help="a new run from a run's conversation at a step, going on live from there"
    )
    p.add_argument("run_id", help="the run (or thread, with --execution) to fork")
    p.add_argument(
        "--at-step",
        type=int,
        required=True,
        metavar="N",
        help="the model call to start at (`toren events RUN` numbers them): it runs again, "
        "with what it saw then; nothing before it runs again",
    )
    p.add_argument("--execution", type=int, metavar="K", help="a thread's K-th execution")
    p.add_argument(
        "--agent",
        metavar="DIR",
        help="run the fork with this agent folder, served by this command on a queue of its "
        "own (default: the source's workers run it)",
    )
    p.add_argument("--model", help="with --agent: serve it with this model")
    p.add_argument("--prompt-append", metavar="TEXT", help="one more user message after the cut")
    p.add_argument("--id", help="the fork's run (workflow) id; default <agent>-fork-<random>")
    p.add_argument("--no-wait", action="store_true", help="print the run id and return")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")
    p.set_defaults(handler=cmd_fork)

    p = sub.add_parser("events", help="a run's history as an event log")
    p.add_argument("run_id")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument(
        "--flat", action="store_true", help="leave out child runs' events (nested by default)"
    )
    p.set_defaults(handler=cmd_events)

    p = sub.add_parser(
        "replay", help="replay runs (ids, or history JSON files) against this code: a deploy check"
    )
    p.add_argument("source", nargs="+", help="run id, or a history .json file")
    p.set_defaults(handler=cmd_replay)


async def cmd_run(args: argparse.Namespace) -> int:
    # Loading the folder imports the agent's tools: the one module that may (`_agents`).
    from toren.cli._agents import load_folder

    agent = load_folder(args.agent_dir)
    client = await connect(args)
    arguments = dict(_parse_kv(a) for a in args.arg) if args.arg else None
    wall = agent.config.limits.max_wall_clock_min
    handle = await toren_client.start_run(
        client,
        agent.name,
        args.prompt,
        run_id=args.id,
        arguments=arguments,
        attachments=args.attach or None,
        task_queue=agent.task_queue,
        # Past the run's own wall-clock budget, so the workflow ends itself cleanly first.
        execution_timeout=timedelta(minutes=wall + 5) if wall else None,
    )
    _started_run.append(handle.id)
    # With --json, stdout holds only the events' JSON lines; what a person reads goes to stderr.
    said = sys.stderr if args.json else sys.stdout
    print(f"run {handle.id} started (agent {agent.name}, task queue {agent.task_queue})", file=said)
    ui = _ui_url(client, handle.id)
    if ui:
        print(f"  Web UI: {ui}", file=said)
    if args.no_wait:
        return 0
    return await _follow(
        client, handle.id, as_json=args.json, show_help=True, agent_dir=args.agent_dir
    )


async def cmd_fork(args: argparse.Namespace) -> int:
    if args.model and not args.agent:
        raise UsageError(
            "--model needs --agent DIR: the fork is then served here, by DIR with that model "
            "(without --agent, the source agent's own workers run it with their model)"
        )
    if args.agent and args.no_wait:
        raise UsageError(
            "--no-wait with --agent: the fork runs on a queue only this command serves, so it "
            "waits for the fork's end"
        )
    client = await connect(args)
    fork = {
        "execution": args.execution,
        "prompt_append": args.prompt_append,
        "workflow_id": args.id,
    }
    if not args.agent:
        handle = await toren_client.fork_run(client, args.run_id, args.at_step, **fork)
        return await follow(client, handle.id, args)
    # Serving the folder imports the agent's tools: the one module that may (`_agents`).
    from toren.cli._agents import serving_fork

    async with serving_fork(client, args) as (run_id, queue):
        fork.update(workflow_id=run_id, task_queue=queue)
        handle = await toren_client.fork_run(client, args.run_id, args.at_step, **fork)
        return await follow(client, handle.id, args, agent_dir=args.agent)


async def follow(
    client: Client, run_id: str, args: argparse.Namespace, agent_dir: str | None = None
) -> int:
    """Say the fork `run_id` started, then follow it like `toren run` (unless `--no-wait`)."""
    _started_run.append(run_id)
    said = sys.stderr if args.json else sys.stdout
    where = f"{args.run_id} at step {args.at_step}"
    if args.execution:
        where += f" of execution {args.execution}"
    print(f"run {run_id} started: forked from {where}", file=said)
    ui = _ui_url(client, run_id)
    if ui:
        print(f"  Web UI: {ui}", file=said)
    if args.no_wait:
        return 0
    return await _follow(client, run_id, as_json=args.json, show_help=True, agent_dir=agent_dir)


def after_ctrl_c() -> str | None:
    """What to say when Ctrl-C stops `toren run` following: the run goes on, and how to reach it."""
    if not _started_run:
        return None
    run = _started_run[-1]
    return (
        f"\nstopped following; run {run} goes on on the server.\n"
        f"  follow it:  {toren_command(f'events {run} --follow')}\n"
        f"  approve:    {toren_command(f'pending {run}')}, "
        f"then {toren_command(f'approve {run} CALL_ID')}\n"
        f"  cancel it:  {pasteable(f'temporal workflow cancel --workflow-id {run}')}"
    )


def _ui_url(client: Client, run_id: str) -> str | None:
    """The run's Web UI page, or None when nothing says where the UI is.

    From `TOREN_UI_URL` or `TEMPORAL_UI_URL`; else only for the dev server's default address,
    whose UI is on 8233 (a gRPC port says nothing of its UI's port).
    """
    base = os.environ.get("TOREN_UI_URL") or os.environ.get("TEMPORAL_UI_URL")
    if not base:
        host = client.service_client.config.target_host
        if host not in ("localhost:7233", "127.0.0.1:7233"):
            return None
        base = "http://localhost:8233"
    return f"{base.rstrip('/')}/namespaces/{client.namespace}/workflows/{run_id}"


def _parse_kv(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--arg takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


async def cmd_events(args: argparse.Namespace) -> int:
    client = await connect(args)
    if args.follow:
        await ensure_readable(client, args.run_id)  # the live log would show garbled events
        return await _follow(client, args.run_id, as_json=args.json, show_help=False)
    read = toren_client.events if args.flat else nested_events
    for event in await read(client, args.run_id):
        print(json.dumps(event) if args.json else format_event(event))
    return 0


async def _follow(
    client: Client, run_id: str, *, as_json: bool, show_help: bool, agent_dir: str | None = None
) -> int:
    """Print the run's events live, from the chain's first run to the one that closes it.

    Exit status 0 when that run completed, 1 when it failed, timed out, was cancelled or
    terminated. With `show_help`, also say what the run waits for (`toren.cli._watch`).
    """
    watcher = None
    printer = None
    live = None
    if not as_json:
        # The model's text as it streams and tools' progress, between the event log's lines.
        printer = LivePrinter()
        live = asyncio.create_task(printer.follow(client, run_id))
    if show_help and not as_json:

        def say(line: str) -> None:
            if printer is not None:
                printer.line(f"  …  {line}")
            else:
                print(f"  …  {line}", flush=True)

        watcher = asyncio.create_task(
            watch(client, run_id, say, agent_dir=agent_dir or "<agent folder>")
        )
    try:
        return await _print_chain(
            client, run_id, as_json=as_json, show_help=show_help, printer=printer
        )
    finally:
        for task in (watcher, live):
            if task is not None:
                task.cancel()


async def _print_chain(
    client: Client,
    run_id: str,
    *,
    as_json: bool,
    show_help: bool,
    printer: LivePrinter | None = None,
) -> int:
    stream = EventStream(client.data_converter)

    def show(text: str) -> None:
        if printer is None:
            print(text, flush=True)
        else:
            printer.line(text)

    run: str | None = await toren_client.first_run(client, run_id)
    status = 0
    while run is not None:
        handle = client.get_workflow_handle(run_id, run_id=run)
        run = None
        async for history_event in handle.fetch_history_events(wait_new_event=True):
            for event in await stream.feed(history_event):
                show(json.dumps(event) if as_json else format_event(event))
                if event["type"] == "RunCompleted" and "output" in event and not as_json:
                    show(json.dumps(event["output"], indent=2, ensure_ascii=False))  # typed
                if printer is not None and event["type"] in ("RunCompleted", *_UNSUCCESSFUL):
                    printer.closed = True  # the run's end is the last line
                if event["type"] == "ApprovalRequested" and show_help and not as_json:
                    call = event["callId"]
                    show(
                        f"  ⏸  waiting for approval of {event['tool']} ({call}). Approve it in "
                        f"the Web UI (More Actions → Send a Signal → approve, "
                        f'Data {{"call_id": "{call}", "by": "you"}}) or run:\n'
                        f"       {toren_command(f'approve {run_id} {call}')}\n"
                        f"       {toren_command(f'deny {run_id} {call}')} --comment 'why'"
                    )
                if event["type"] == "RunContinuedAsNew":
                    run = event["newRunId"]  # the same run goes on in a new history
                if event["type"] in _UNSUCCESSFUL:
                    status = 1
    return status


async def cmd_replay(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowHistory

    histories: list[WorkflowHistory] = []
    client: Client | None = None
    for source in args.source:
        path = Path(source)
        if path.suffix == ".json" and path.is_file():
            histories.append(WorkflowHistory.from_json(path.stem, path.read_text()))
            continue
        client = client or await connect(args)
        histories += await toren_client.histories(client, source)
    # The client's converter has the team's codec; without a client, the settings name it.
    team = client.data_converter if client else codec_settings(args).converter("default")
    checks = await toren_client.replay(histories, team)
    for check in checks:
        if check.ok:
            print(f"ok      {check.workflow_id}: {check.events} events replay")
        else:
            print(f"FAILED  {check.workflow_id}: {check.error}")
    replayed = sum(check.ok for check in checks)
    print(f"{replayed} of {len(checks)} histories replay against this code")
    return 0 if replayed == len(checks) else 1
