"""`toren eval`: re-run recorded runs with a changed agent folder and report how they differ.

```
toren eval ./support-v2 --runs support-a1 support-a2 [--model M] [--out report/]
toren eval ./support-v2 --query 'TorenAgent="support" AND CloseTime > "2026-12-01T00:00:00Z"'
```

Each recorded run's prompt runs again as an eval run (`toren.client.start_eval`) on a task
queue this command serves with the folder, in this process: `external` tools are answered from
the recorded calls and never executed, `none` and `sandbox` tools run. The command waits for
every eval run, then prints a table (and, with `--out DIR`, writes `report.md` and
`report.json`). Exit 0 once the report is out, 2 on bad input (one line saying what).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path

from toren import client as toren_client
from toren.cli._common import connect
from toren.client._trajectory import Scorer
from toren.errors import UsageError

__all__ = ["add_parsers", "cmd_eval"]

READ_AT_ONCE = 8
"""Recorded runs read from the server at once."""


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`eval`."""
    p = sub.add_parser(
        "eval",
        help="re-run recorded runs with a changed agent (external tools answered from the "
        "record, never run) and report where they diverge",
    )
    p.add_argument("agent_dir", help="the changed agent's folder (same agent name)")
    p.add_argument("--runs", nargs="+", metavar="RUN", help="the recorded runs to re-run")
    p.add_argument(
        "--query",
        metavar="QUERY",
        help="or a visibility query choosing them, e.g. 'TorenAgent=\"support\"' (closed "
        "AgentRun runs only; eval runs are left out)",
    )
    p.add_argument("--limit", type=int, default=20, help="with --query: at most N runs (20)")
    p.add_argument("--model", help="serve the changed agent with this model")
    p.add_argument("--parallel", type=int, default=4, help="eval runs at once (4)")
    p.add_argument(
        "--scorer",
        action="append",
        metavar="MODULE:FUNCTION",
        help="score(original, candidate) -> float | dict; repeatable; default exact_match "
        "and tool_sequence (built in)",
    )
    p.add_argument(
        "--on-diverge",
        default="continue",
        help="continue (an error result, the run goes on; default) or stop (the run fails, "
        "kind Diverged)",
    )
    p.add_argument("--out", metavar="DIR", help="write report.md and report.json here")
    p.set_defaults(handler=cmd_eval)


async def cmd_eval(args: argparse.Namespace) -> int:
    if bool(args.runs) == bool(args.query):
        raise UsageError("give the recorded runs to re-run: --runs RUN... or --query QUERY")
    if args.parallel < 1 or args.limit < 1:
        raise UsageError("--parallel and --limit take a whole number from 1")
    if args.on_diverge not in ("continue", "stop"):
        raise UsageError(f"--on-diverge takes continue or stop, got {args.on_diverge!r}")
    scorers = _scorers(args.scorer or ["exact_match", "tool_sequence"])
    # Loading the folder imports the agent's tools: the one module that may (`_agents`).
    from toren.cli._agents import load_folder, serving

    agent = load_folder(args.agent_dir)
    client = await connect(args)
    run_ids = args.runs or await toren_client.runs_matching(client, args.query, args.limit)
    limit = asyncio.Semaphore(READ_AT_ONCE)

    async def read(run_id: str) -> toren_client.EvalSource:
        async with limit:
            return await toren_client.eval_source(client, run_id, agent=agent.name)

    sources = list(await asyncio.gather(*(read(r) for r in dict.fromkeys(run_ids))))
    # A queue of this command's own: two evals of different folders never take each other's
    # tasks; its name starts with `<agent>.eval` for the Web UI's filter.
    queue = f"{agent.name}.eval-{uuid.uuid4().hex[:8]}"
    print(f"eval of {len(sources)} run(s) of {agent.name!r} on task queue {queue}", flush=True)
    async with serving(client, agent, queue, args.model):
        cases = await toren_client.run_evals(
            client,
            sources,
            task_queue=queue,
            scorers=scorers,
            parallel=args.parallel,
            on_diverge=args.on_diverge,
        )
    print(toren_client.eval_table(cases))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(
            toren_client.eval_markdown(cases, agent=agent.name, model=args.model)
        )
        (out / "report.json").write_text(
            toren_client.eval_json(cases, agent=agent.name, model=args.model)
        )
        print(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    return 0


def _scorers(specs: list[str]) -> dict[str, Scorer]:
    """The scorers `--scorer` names; a module is looked for from the current folder too."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found: dict[str, Scorer] = {}
    for spec in specs:
        name, scorer = toren_client.load_scorer(spec)
        found[name] = scorer
    return found
