"""`toren deploy check` and `toren deploy move-threads`: a deploy's checks and its last step.

`toren deploy move-threads AGENT_DIR...` moves, after a versioned deploy, the threads at rest on
an old Worker Deployment Version onto the current one, so the old version's workers can stop.
`toren deploy check AGENT_DIR...`: would this code break what the agents have in flight?

For each agent folder (its name read from agent.yaml, its tools not imported), replays the
current run of every running run and thread, and of those closed within `--closed-within`,
against this code, as a worker without Worker Versioning would at their next workflow task
(`toren.client.deploy_check`). One line per workflow, then what a break means and what to do.
Exit status 0 when all replay, 1 when any breaks, 2 when the check could not run (no such
folder, no agent.yaml, no server, no `TorenAgent` search attribute, a codec missing): CI in the
team's repository runs it before a deploy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError

from toren import client as toren_client
from toren.agent._config import read_config
from toren.cli._common import Unreachable, add_codec_flags, connect
from toren.client import ReplayCheck
from toren.errors import CodecServerError, ConfigError, UndecodablePayloadError, UsageError

__all__ = ["add_parsers", "cmd_deploy_check", "cmd_move_threads"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

CANNOT_CHECK = 2
"""The exit status when nothing was replayed: a usage error, no server, no codec."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`deploy check`."""
    p = sub.add_parser("deploy", help="checks to run before deploying a change")
    deploy_sub = p.add_subparsers(dest="deploy_command", required=True)
    p = deploy_sub.add_parser(
        "check",
        help="replay the agents' running (and recently closed) runs and threads against this code",
    )
    p.add_argument("agent_dir", nargs="+")
    p.add_argument(
        "--closed-within", type=_duration, default="7d", metavar="AGE",
        help="also replay runs and threads closed this recently: 30m, 12h, 7d, 2w (default 7d)",
    )  # fmt: skip
    p.add_argument(
        "--limit", type=_positive, default=100,
        help="at most this many workflows per agent, running ones first (default 100)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_deploy_check)
    add_codec_flags(p)
    p = deploy_sub.add_parser(
        "move-threads",
        help="move the agents' threads resting on an old Worker Deployment Version to the "
        "current one (so the old version's workers can stop)",
    )
    p.add_argument("agent_dir", nargs="+")
    p.add_argument(
        "--wait", type=_duration, default="60s", metavar="AGE",
        help="how long to wait for threads in the middle of an answer (default 60s)",
    )  # fmt: skip
    p.set_defaults(handler=cmd_move_threads)
    add_codec_flags(p)


def _duration(text: str) -> timedelta:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is no age: a number and s, m, h, d or w (7d)")
    return timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is no count of workflows (1 or more)")
    return int(text)


def _agent_name(folder: str) -> str:
    """The agent's name in `folder`'s agent.yaml, read without loading its tools.

    Raises:
        UsageError: no such folder, or no agent.yaml in it.
        ConfigError: agent.yaml gives no valid name.
    """
    path = Path(folder)
    if not path.is_dir():
        raise UsageError(f"no agent folder at {folder} (give the folder that holds agent.yaml)")
    if not (path / "agent.yaml").is_file():
        raise UsageError(
            f"{folder} has no agent.yaml: give an agent's folder (agent.yaml, instructions.md, "
            "tools/), as to `toren worker`"
        )
    config, problems, failed = read_config(path / "agent.yaml")
    if "name" in failed:
        raise ConfigError("\n".join(problems))
    return config.name


async def cmd_deploy_check(args: argparse.Namespace) -> int:
    """Replay each agent's workflows; print a line each and what to do about breaks."""
    agents = {folder: _agent_name(folder) for folder in args.agent_dir}

    async def check(client: Client, name: str) -> list[ReplayCheck]:
        return await toren_client.deploy_check(
            client, name, closed_within=args.closed_within, limit=args.limit
        )

    checked = await _ask_each(args, agents, check)
    if checked is None:
        return CANNOT_CHECK
    every = [check for checks in checked.values() for check in checks]
    if args.json:
        print(json.dumps(_as_json(args, agents, checked)))
    else:
        for folder, name in agents.items():
            _print_agent(folder, name, checked[name], _age(args.closed_within))
        _print_summary(every)
    return 0 if all(check.ok for check in every) else 1


async def cmd_move_threads(args: argparse.Namespace) -> int:
    """Wake each thread behind its deployment's current version; say which moved."""
    agents = {folder: _agent_name(folder) for folder in args.agent_dir}

    async def wake(client: Client, name: str) -> list[toren_client.ThreadMove]:
        return await toren_client.move_threads(client, name, wait=args.wait)

    moves = await _ask_each(args, agents, wake)
    if moves is None:
        return CANNOT_CHECK
    stuck = 0
    for folder, name in agents.items():
        if not moves[name]:
            print(f"agent {name} ({folder}): no running thread rests on an older version")
        for move in moves[name]:
            if move.moved:
                print(f"  moved  {move.thread_id}: {move.was} -> {move.now}")
            elif move.busy:
                stuck += 1
                print(
                    f"  busy   {move.thread_id} on {move.now}: answering a message; it moves "
                    f"to {move.current} by itself once that answer is done"
                )
            else:
                stuck += 1
                print(
                    f"  still  {move.thread_id} on {move.now} (current {move.current}): is a "
                    f"worker of {move.now} up? run this again later"
                )
    return 1 if stuck else 0


T = TypeVar("T")


async def _ask_each(
    args: argparse.Namespace,
    agents: dict[str, str],
    ask: Callable[[Client, str], Awaitable[T]],
) -> dict[str, T] | None:
    """`ask(client, name)` for each agent; `None`, having said why, when Temporal could not."""
    try:
        client = await connect(args)
        return {name: await ask(client, name) for name in agents.values()}
    except (Unreachable, UndecodablePayloadError, CodecServerError) as err:
        print(f"toren: {err}", file=sys.stderr)
    except RPCError as err:
        print(f"toren: Temporal said: {err.message}", file=sys.stderr)
    return None


def _print_agent(folder: str, name: str, checks: list[ReplayCheck], within: str) -> None:
    if not checks:
        print(f"agent {name} ({folder}): no run or thread running or closed within {within}")
        return
    running = sum(check.running for check in checks)
    print(
        f"agent {name} ({folder}): {running} running, {len(checks) - running} closed "
        f"within {within}"
    )
    for check in checks:
        verdict = "ok    " if check.ok else "BREAKS"
        line = f"  {verdict}  {check.status:<7}  {check.kind:<6}  {check.workflow_id}"
        if check.error is not None:
            line += f": {check.error.strip().splitlines()[0]}"
        print(line)


def _print_summary(checks: list[ReplayCheck]) -> None:
    broken = [check for check in checks if not check.ok]
    if not checks:
        print("nothing to replay: no run or thread of these agents is in flight or closed lately")
        return
    if not broken:
        print(
            f"{len(checks)} of {len(checks)} replay against this code: nothing checked breaks "
            "(only the paths these histories took are checked)"
        )
        return
    running = sum(check.running for check in broken)
    print(
        f"{len(checks) - len(broken)} of {len(checks)} replay against this code; "
        f"{len(broken)} BREAKS ({running} running, {len(broken) - running} closed)\n\n"
        "BREAKS: this code makes other commands than the history recorded. On workers without\n"
        "Worker Versioning, a running one fails its next workflow task (an approval, a message,\n"
        "a timer) with a nondeterminism error, again at every retry, until a worker with the\n"
        "old code serves it."
    )
    if running < len(broken):
        print(
            "A closed one runs no more (a query replays it, and fails); runs in flight that are\n"
            "past the same change when the new workers take them break the same way."
        )
    print(
        "Before you deploy, either:\n"
        '  - put the change behind `workflow.patched("<change-id>")`, so recorded histories take\n'
        "    the old branch, and check again; or\n"
        "  - deploy with Worker Versioning (`toren worker --deployment NAME --build-id ID`): runs\n"
        "    stay pinned to the version they started on and finish there, threads move to the\n"
        "    new version only at rest, so BREAKS in running runs and threads matter only for an\n"
        "    unversioned deploy. Keep the old version's workers up until its runs drain."
    )


def _age(within: timedelta) -> str:
    """`within` in the largest unit up to days that says it whole (14d, not 2w)."""
    seconds = within.total_seconds()
    for unit in "dhm":
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _as_json(
    args: argparse.Namespace, agents: dict[str, str], checked: dict[str, list[ReplayCheck]]
) -> dict[str, Any]:
    workflows = [
        {
            "agent": name,
            "id": check.workflow_id,
            "run_id": check.run_id,
            "type": check.kind,
            "status": check.status,
            "ok": check.ok,
            "error": check.error,
            "events": check.events,
        }
        for name, checks in checked.items()
        for check in checks
    ]
    broken = [w for w in workflows if not w["ok"]]
    return {
        "ok": not broken,
        "agents": [{"agent": name, "folder": folder} for folder, name in agents.items()],
        "closed_within": _age(args.closed_within),
        "limit": args.limit,
        "workflows": workflows,
        "totals": {
            "workflows": len(workflows),
            "ok": len(workflows) - len(broken),
            "breaks": len(broken),
            "breaks_running": sum(w["status"] == "running" for w in broken),
            "breaks_closed": sum(w["status"] == "closed" for w in broken),
        },
    }
