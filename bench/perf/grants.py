"""What a remembered approval saves: a thread of N refunds, with and without `remember: thread`.

    python -m bench.perf.grants [--refunds 10]

Starts its own dev server and serves a copy of examples/support whose scripted model refunds
149 on every message of a thread (each refund over 100 waits for a person). Without a policy a
person decides every refund; with `approvals.rules: [{name: small-refunds, tool: refund_order,
when: {amount: {lt: 200}}, remember: thread}]` the first decision is remembered and the rest
go through by the rule. Prints, for each: the decisions a person made, the thread's history
events and bytes, and the wall time of the thread's messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from toren import client as toren_client
from toren.connect import connect
from toren.testing import DevServer
from toren.worker import serve
from toren.worker.models import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
RULE = {
    "rules": [
        {
            "name": "small-refunds",
            "tool": "refund_order",
            "when": {"amount": {"lt": 200}},
            "remember": "thread",
        }
    ]
}


def _script(refunds: int) -> list[Any]:
    steps: list[Any] = []
    for n in range(refunds):
        args = {"order_id": f"A-{1000 + n}", "amount": 149.0, "reason": "arrived damaged"}
        steps.append({"tool_calls": [{"id": f"r{n}", "name": "refund_order", "args": args}]})
        steps.append("Done: {last_tool_result}")
    return steps


async def _thread(client: Any, refunds: int, label: str) -> dict[str, Any]:
    thread = await toren_client.start_thread(client, "support", user_id="bench")
    decisions = 0
    started = time.perf_counter()
    for n in range(refunds):
        answer = asyncio.create_task(
            toren_client.send_message(client, thread.id, f"refund order A-{1000 + n}")
        )
        while not answer.done():
            calls = await toren_client.pending(client, thread.id)
            for call in calls:
                await toren_client.approve(client, thread.id, call.call_id, by="alice")
                decisions += 1
            await asyncio.sleep(0.05)
        await answer
    elapsed = time.perf_counter() - started
    history = await client.get_workflow_handle(thread.id).fetch_history()
    await toren_client.close_thread(client, thread.id, by="bench")
    return {
        "label": label,
        "decisions": decisions,
        "events": len(history.events),
        "bytes": history.to_json().encode().__len__(),
        "seconds": elapsed,
    }


async def main(refunds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="toren-grants-"))
    os.environ.update(SUPPORT_DESK_TOKEN="demo", SUPPORT_OUTBOX=str(work / "outbox"))
    rows = []
    with DevServer(work / "temporal") as server:
        client = await connect(target_host=server.address)
        for label, policy in (("person decides each", None), ("remember: thread", RULE)):
            folder = work / label.replace(" ", "-").replace(":", "") / "support"
            shutil.copytree(ROOT / "examples" / "support", folder)
            if policy is not None:
                config = yaml.safe_load((folder / "agent.yaml").read_text())
                config["approvals"] = policy
                (folder / "agent.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            model = ScriptedModel(_script(refunds))
            async with serve(client, [folder], models={"mock/scripted": model}):
                rows.append(await _thread(client, refunds, label))
    print(f"{refunds} refunds of 149 in one thread (each over 100 waits for a person)")
    print(f"{'':22} {'decisions':>9} {'events':>7} {'history bytes':>14} {'seconds':>8}")
    for r in rows:
        print(
            f"{r['label']:22} {r['decisions']:>9} {r['events']:>7} {r['bytes']:>14,} "
            f"{r['seconds']:>8.2f}"
        )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refunds", type=int, default=10)
    asyncio.run(main(parser.parse_args().refunds))
