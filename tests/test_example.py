"""The demo agent in examples/support, served by a real `toren worker` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from tests.conftest import ROOT, DevServer, fetch_history, secret, wait_for
from toren import client as toren_client


async def test_demo_agent_parks_on_the_refund_and_finishes_when_approved(
    client: Client, dev_server: DevServer, tmp_path: Path
) -> None:
    token = secret("desk-token-5d1e77")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_server.address,
        "SUPPORT_DESK_TOKEN": token,
        "SUPPORT_OUTBOX": str(tmp_path / "outbox"),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", str(ROOT / "examples" / "support")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        handle = await toren_client.start_run(client, "support", "Refund A-1001 please")
        calls = await wait_for(lambda: toren_client.pending(client, handle.id), timeout=60)
        assert calls[0].tool == "refund_order"
        assert calls[0].args == {"order_id": "A-1001", "amount": 149.0, "reason": "arrived damaged"}
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "toren.cli", "approve", handle.id, calls[0].call_id, "--by", "qa"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        result = await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        worker.terminate()
        worker.wait(30)
    assert result.text == f"Done: refunded 149.00 on order A-1001 (ref {handle.id}:2:call_refund)"
    ledger = (tmp_path / "outbox" / "refunds.jsonl").read_text().splitlines()
    assert [json.loads(x)["key"] for x in ledger] == [f"{handle.id}:2:call_refund"]
    history = await fetch_history(client, handle.id)
    assert token.encode() not in history.to_json().encode()
