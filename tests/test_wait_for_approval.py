"""`toren.client.wait_for_approval`: returns the waiting calls, or says why there are none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.conftest import result_of
from toren import ApprovalWaitError
from toren.client import approve, start_run, wait_for_approval
from toren.worker import serve

GATED = """
from toren import define_tool

tool = define_tool(
    description="Pay.", input={"type": "object", "properties": {}},
    effects="external", idempotency="keyed", approval="always", handler=lambda a, c: "paid",
)
"""


async def test_waits_for_the_gated_call_then_the_run_finishes(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    folder = make_agent(
        tools={"pay": GATED},
        script=[{"tool_calls": [{"id": "call_pay", "name": "pay", "args": {}}]}, "paid"],
    )
    async with serve(client, [folder]):
        handle = await start_run(client, agent_name, "pay")
        calls = await wait_for_approval(client, handle.id, timeout=30)
        assert [c.call_id for c in calls] == ["call_pay"]
        await approve(client, handle.id, "call_pay", by="alice")
        assert (await result_of(handle)).text == "paid"


async def test_a_run_that_closes_first_is_an_error(
    client: Client, make_agent: Callable[..., Path], agent_name: str
) -> None:
    folder = make_agent(script=["nothing to approve"])
    async with serve(client, [folder]):
        handle = await start_run(client, agent_name, "hi")
        await result_of(handle)
        with pytest.raises(ApprovalWaitError, match=r"closed \(completed\) before any call"):
            await wait_for_approval(client, handle.id, timeout=5)


async def test_no_worker_is_a_timeout_that_says_what_to_check(
    client: Client, agent_name: str
) -> None:
    handle = await start_run(client, agent_name, "hi")
    try:
        with pytest.raises(ApprovalWaitError, match="within 1 s .*is a worker serving"):
            await wait_for_approval(client, handle.id, timeout=1)
    finally:
        await handle.terminate("test done")
