"""`toren eval` on examples/support, end to end: record N runs, eval a changed copy, measure.

    python -m bench.perf.eval_support [--runs 20] [--keep DIR]

Starts its own dev server, serves examples/support in-process (the scripted model), records
`--runs` runs (each refund over 100 approved by "alice"), then runs `toren eval` as a user
would, with a copy of the folder whose instructions and script refund at most 100. Prints the
eval's table, its wall time, history bytes per eval run against the originals', and how many
refunds the ledger (written by the tool itself, outside Temporal) holds before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from toren import client as toren_client
from toren.connect import connect
from toren.testing import DevServer
from toren.worker import serve

ROOT = Path(__file__).resolve().parents[2]
CHANGED_INSTRUCTIONS = (
    "\n- New policy: refund at most 100 yourself, never more; offer store credit for the rest.\n"
)
CHANGED_SCRIPT = [
    {
        "text": "Let me look that order up.",
        "tool_calls": [
            {"id": "call_lookup", "name": "lookup_order", "args": {"order_id": "A-1001"}}
        ],
    },
    {
        "text": "It arrived damaged: I refund 100 and offer store credit for the rest.",
        "tool_calls": [
            {
                "id": "call_refund",
                "name": "refund_order",
                "args": {"order_id": "A-1001", "amount": 100.0, "reason": "arrived damaged"},
            }
        ],
    },
    "Done: {last_tool_result}",
]


async def main(runs: int, keep: Path | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="toren-eval-"))
    outbox = work / "outbox"
    os.environ.update(SUPPORT_DESK_TOKEN="demo", SUPPORT_OUTBOX=str(outbox))
    changed = work / "support-v2" / "support"
    shutil.copytree(ROOT / "examples" / "support", changed)
    with (changed / "instructions.md").open("a") as f:
        f.write(CHANGED_INSTRUCTIONS)
    (changed / "mock_script.yaml").write_text(yaml.safe_dump(CHANGED_SCRIPT, sort_keys=False))
    with DevServer(work / "temporal") as server:
        client = await connect(target_host=server.address)
        async with serve(client, [ROOT / "examples" / "support"]):
            ids = [f"support-recorded-{n}" for n in range(runs)]
            for run_id in ids:
                await toren_client.start_run(
                    client, "support", "Order A-1001 arrived broken.", run_id=run_id
                )
            for run_id in ids:
                for call in await toren_client.wait_for_approval(client, run_id, timeout=60):
                    await toren_client.approve(client, run_id, call.call_id, by="alice")
                await client.get_workflow_handle(run_id).result()
        ledger = outbox / "refunds.jsonl"
        before = len(ledger.read_text().splitlines())
        out = keep or work / "report"
        env = {**os.environ, "TEMPORAL_ADDRESS": server.address, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "toren.cli", "eval", str(changed), "--runs", *ids,
             "--out", str(out)],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
        print(done.stdout, done.stderr, sep="")
        report = yaml.safe_load((out / "report.json").read_text())  # JSON is YAML
        original = [len(await _bytes(client, r)) for r in ids]
        evals = [len(await _bytes(client, r["eval_run"])) for r in report["runs"]]
        after = len(ledger.read_text().splitlines())
    print(f"eval of {runs} runs: {wall:.1f} s wall (command start to report, serving included)")
    print(
        f"history bytes per run: original {sum(original) / runs:.0f}, eval {sum(evals) / runs:.0f}"
    )
    print(f"refunds in the ledger: {before} before the eval, {after} after")
    if keep is None:
        shutil.rmtree(work, ignore_errors=True)


async def _bytes(client: object, run_id: str) -> bytes:
    history = await client.get_workflow_handle(run_id).fetch_history()  # type: ignore[attr-defined]
    return history.to_json().encode()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="write the report here and keep it")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.keep))
