"""The `toren` command: run workers, start runs, decide approvals, read the event log.

A client like `toren.client`, one module per command group: `_runs` (run, fork, events, replay),
`_approvals` (pending, approve, deny), `_chat`, `_store` (attach, workspace, store prune),
`_setup` (setup, serve), `_deploy` (deploy check), `_eval` (eval); what they share is in
`_common`. Only the
commands that run agent code on this machine (`worker`, `check`, and loading the folder `run`
and `chat` are given) reach into the worker's side, through `_agents`, imported when they run.

```
toren worker examples/support               serve an agent (until Ctrl-C)
toren run examples/support "Refund A-1001"  start a run and follow it live
toren chat examples/support [--thread ID]   talk in a thread; approvals asked inline
toren pending [RUN]                         calls waiting for a decision (no RUN: all)
toren approve RUN CALL_ID --by alice        approve one (deny works the same)
toren events RUN [--json]                   the run's history as an event log
toren fork RUN --at-step N [--agent DIR]    a new run from RUN's conversation at step N
toren eval DIR --runs RUN... [--out D]      re-run recorded runs with a changed agent; report
toren check examples/support                load, validate, print tools and schemas
toren new agents/helpdesk                   a new agent folder that passes check and its test
toren setup                                 register toren's search attributes
toren attach report.pdf                     parse a file for read_attachment; prints its id
toren replay RUN | history.json             replay against this code before you deploy it
toren deploy check examples/support         replay the agent's runs and threads in flight
toren serve [--host H] [--port P]           the HTTP API (needs `pip install 'toren[web]'`)
```

Connection settings come from Temporal's own env and config (TEMPORAL_ADDRESS, ...), the
payload codec from the `temporal` CLI's flags and settings (`--codec-endpoint`, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence

from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from toren.cli import (
    _approvals,
    _chat,
    _compact,
    _deploy,
    _eval,
    _new,
    _questions,
    _runs,
    _setup,
    _store,
)
from toren.cli._common import Unreachable, add_codec_flags
from toren.errors import CodecServerError, TorenError, UndecodablePayloadError

__all__ = ["entrypoint", "main"]


async def _worker(args: argparse.Namespace) -> int:
    from toren.cli._agents import cmd_worker

    return await cmd_worker(args)


async def _check(args: argparse.Namespace) -> int:
    from toren.cli._agents import cmd_check

    return await cmd_check(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toren", description="Durable LLM agents on Temporal.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("worker", help="serve agent folders until Ctrl-C")
    p.add_argument("agent_dir", nargs="+")
    p.add_argument("--model", help="serve with this model instead of agent.yaml's")
    p.add_argument(
        "--deployment",
        metavar="NAME",
        help="serve as a version of this Worker Deployment (default $TOREN_DEPLOYMENT): runs "
        "stay on the version they start on, threads move to the current one between messages",
    )
    p.add_argument(
        "--build-id",
        metavar="ID",
        help="this worker's version in the deployment (default $TOREN_BUILD_ID): a commit, a tag",
    )
    p.set_defaults(handler=_worker)

    _runs.add_parsers(sub)
    _eval.add_parsers(sub)
    _chat.add_parsers(sub)
    _compact.add_parsers(sub)
    _approvals.add_parsers(sub)
    _questions.add_parsers(sub)
    _setup.add_parsers(sub)
    _store.add_parsers(sub)
    _deploy.add_parsers(sub)
    _new.add_parsers(sub)

    p = sub.add_parser("check", help="load and validate agent folders")
    p.add_argument("agent_dir", nargs="+")
    p.add_argument("--no-schemas", dest="schemas", action="store_false")
    p.set_defaults(handler=_check)
    # Every command that talks to Temporal reads and writes through the team's codec (`deploy
    # check` has them on itself, not on its group).
    for name, command in sub.choices.items():
        if name not in ("check", "attach", "deploy", "new"):
            add_codec_flags(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `toren` command."""
    args = _parser().parse_args(argv)
    try:
        status: int = asyncio.run(args.handler(args))
        return status
    except Unreachable as err:
        print(f"toren: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `toren events RUN | head -1`: the reader left, which is no error of ours. Point
        # stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UndecodablePayloadError, CodecServerError) as err:  # no codec here, or it is down
        print(f"toren: {err}", file=sys.stderr)
        return 1
    except TorenError as err:  # a bad agent folder, missing env, a file that cannot attach
        print(f"toren: {err}", file=sys.stderr)
        return 2
    except WorkflowFailureError as err:
        print(f"toren: run failed: {err.cause}", file=sys.stderr)
        return 1
    except RPCError as err:
        print(f"toren: Temporal said: {err.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        note = _runs.after_ctrl_c() if args.command in ("run", "fork") else None
        if note:
            print(note, file=sys.stderr, flush=True)
        return 130


def entrypoint() -> None:
    """The console script: `main`, then a hard exit.

    The Temporal client's native runtime can abort the interpreter while it finalizes
    (`PyGILState_Release`) after the command is done; exiting directly avoids that.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError):  # the reader (`| head -1`) left early
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
