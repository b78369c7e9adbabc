"""The fault harness: toren's durability claims measured with real processes and real faults.

```
.venv/bin/python -m bench.faults.run            # full: 5-10 minutes on 2 cores
.venv/bin/python -m bench.faults.run --short    # CI: ~2 minutes
.venv/bin/python -m bench.faults.run --only 1,3 --runs 40 --seed 7 --keep
```

It starts a `temporal server start-dev` on a SQLite file and free ports, generated agents in a
temp dir whose tools append every execution to a record file outside Temporal, and worker
subprocesses (`python -m toren.cli worker <dir>`). Scenarios:

1. worker SIGKILL at a random moment of a tool call, then a fresh worker (`s1_kill`);
2. worker SIGKILL while runs wait for approval, approval signalled with no worker (`s2_approval`);
3. the dev server stopped and restarted on the same file and ports mid-run (`s3_restart`);
4. model call failures from a fake OpenAI-compatible server (`s4_model`);
5. SIGTERM to a worker with tool calls in flight (`s5_shutdown`);
6. every host SIGKILLed mid bash call, runs finished by a restarted and a new host sharing
   one store; each run's last workspace version checked file by file (`s6_hosts`).

It prints one table of figures and exits 1 when a `must` figure is off (2 on a harness error).
Findings (toren problems measured, not invariants) are flagged but do not fail the run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.faults import s1_kill, s2_approval, s3_restart, s4_model, s5_shutdown, s6_hosts
from bench.faults.common import Harness, quiet_runtime
from bench.faults.report import Figure, render_table
from toren.connect import connect
from toren.testing import DevServer

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.faults.run", description=__doc__.splitlines()[0]
    )
    p.add_argument("--short", action="store_true", help="CI size: fewer runs, slow cases skipped")
    p.add_argument("--runs", type=int, help="scenario 1 runs (default 100, --short 10)")
    p.add_argument("--concurrency", type=int, help="scenario 1 runs in flight (default 8, short 5)")
    p.add_argument("--approval-runs", type=int, help="scenario 2 runs (default 10, short 3)")
    p.add_argument("--restart-runs", type=int, help="scenario 3 runs (default 20, short 6)")
    p.add_argument("--model-runs", type=int, help="scenario 4 flaky runs (default 5, short 2)")
    p.add_argument("--shutdown-runs", type=int, help="scenario 5 runs (default 10, short 3)")
    p.add_argument("--hosts-runs", type=int, help="scenario 6 runs (default 8, short 3)")
    p.add_argument("--only", help="comma-separated scenario numbers, e.g. 1,3")
    p.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, records)")
    return p


async def _main(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    only = {int(x) for x in args.only.split(",")} if args.only else {1, 2, 3, 4, 5, 6}
    short = args.short
    workdir = Path(tempfile.mkdtemp(prefix="toren-faults-"))
    began = time.monotonic()
    print(f"toren fault harness: {'short' if short else 'full'} mode, seed {seed}, dir {workdir}",
          flush=True)  # fmt: skip
    server = DevServer(workdir / "server")
    server.start()
    client = await connect(target_host=server.address, namespace="default", runtime=quiet_runtime())
    h = Harness(server, client, workdir, random.Random(seed), short)
    figures: list[Figure] = []
    try:
        # Scenario 4's timeout and worker-death cases run in the background while the others
        # run; scenario 3 restarts its own server.
        slow = asyncio.create_task(s4_model.run_slow(h)) if 4 in only else None
        steps: list[tuple[int, Callable[[], Awaitable[list[Figure]]]]] = [
            (4, lambda: s4_model.run(h, args.model_runs or (2 if short else 5))),
            (1, lambda: s1_kill.run(h, args.runs or (10 if short else 100),
                                    args.concurrency or (5 if short else 8))),
            (2, lambda: s2_approval.run(h, args.approval_runs or (3 if short else 10))),
            (5, lambda: s5_shutdown.run(h, args.shutdown_runs or (3 if short else 10))),
            (6, lambda: s6_hosts.run(h, args.hosts_runs or (3 if short else 8))),
            (3, lambda: s3_restart.run(h, args.restart_runs or (6 if short else 20))),
        ]  # fmt: skip
        for number, step in steps:
            if number in only:
                print(f"scenario {number} ...", flush=True)
                t0 = time.monotonic()
                figures += await step()
                print(f"scenario {number} done in {time.monotonic() - t0:.0f}s", flush=True)
        if slow is not None:
            print("scenario 4 (slow cases) ...", flush=True)
            figures += await slow
        elif 4 in only:
            figures += s4_model.skipped_slow()
    finally:
        h.cleanup()
        server.stop()
    print()
    print(render_table(figures))
    failed = [f for f in figures if f.kind == "must" and not f.ok]
    findings = [f for f in figures if f.kind == "finding" and not f.ok]
    print()
    print(
        f"{len(failed)} must-figure(s) off, {len(findings)} finding(s); "
        f"{time.monotonic() - began:.0f}s; seed {seed}"
    )
    if args.keep:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; the exit status is 0 only when every must-figure holds."""
    args = _parser().parse_args(argv)
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130
    except Exception:
        # A harness error (a server that would not start, a worker that would not come up) is
        # not a durability verdict: say so with its own exit status.
        traceback.print_exc()
        print("fault harness error: no verdict", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # As toren's CLI does: the Temporal client's native runtime can abort the interpreter while
    # it finalizes, after the work is done.
    os._exit(code)
