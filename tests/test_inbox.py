"""The approval inbox across runs: search attributes kept current, `toren pending` with no run,
and a namespace without the attributes still running every workflow."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from tests.conftest import DevServer, fetch_history, result_of, task_failures, wait_for
from toren import UsageError
from toren import client as toren_client
from toren.connect import _search_attributes as search_attributes
from toren.connect import connect
from toren.worker import serve

GATED = """
from toren import define_tool
tool = define_tool(
    description="Needs a person.",
    input={"type": "object", "properties": {"n": {"type": "integer"}}},
    approval="always",
    handler=lambda a, c: "ran",
)
"""

STATUS = SearchAttributeKey.for_keyword("TorenStatus")
PENDING = SearchAttributeKey.for_int("TorenPendingApprovals")
AGENT = SearchAttributeKey.for_keyword("TorenAgent")


async def test_inbox_lists_waiting_calls_across_runs(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {"n": 1}}]}, "done"],
    )
    async with serve(client, [folder]):
        runs = [await toren_client.start_run(client, folder.name, f"run {i}") for i in range(2)]

        async def both_listed() -> list[toren_client.InboxItem]:
            items = await toren_client.inbox(client, agent=folder.name)
            return items if len(items) == 2 else []

        items = await wait_for(both_listed, timeout=30)
        assert {i.run_id for i in items} == {r.id for r in runs}
        assert all(i.call.tool == "gated" and i.agent == folder.name for i in items)
        desc = await runs[0].describe()
        assert desc.typed_search_attributes.get(STATUS) == "waiting_approval"
        assert desc.typed_search_attributes.get(PENDING) == 1
        assert desc.typed_search_attributes.get(AGENT) == folder.name

        env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "toren.cli", "pending", "--agent", folder.name],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        for r in runs:
            assert f"TEMPORAL_ADDRESS={dev_server.address} toren approve {r.id} g1" in out.stdout

        for r in runs:
            await toren_client.approve(client, r.id, "g1", by="ops")
            await result_of(r)
        desc = await runs[0].describe()
        assert desc.typed_search_attributes.get(STATUS) == "completed"
        assert desc.typed_search_attributes.get(PENDING) == 0
        await wait_for(lambda: _empty(toren_client.inbox(client, agent=folder.name)), timeout=30)


async def _empty(items: Awaitable[list[toren_client.InboxItem]]) -> bool:
    return not await items


async def test_namespace_without_the_attributes_still_runs_and_setup_adds_them(
    client: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    namespace = f"bare-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=_days(1))
    )
    bare = await wait_for(lambda: _connect_when_ready(dev_server.address, namespace), timeout=60)
    assert await search_attributes.missing(bare) == list(search_attributes.SEARCH_ATTRIBUTES)
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]}, "done"],
    )
    caplog.set_level(logging.WARNING, logger="toren")
    async with serve(bare, [folder]):
        handle = await toren_client.start_run(bare, folder.name, "go")
        await wait_for(lambda: toren_client.pending(bare, handle.id))
        await toren_client.approve(bare, handle.id, "g1")
        result = await result_of(handle)
    assert result.text == "done"
    assert (
        "lacks search attributes TorenAgent, TorenStatus, TorenPendingApprovals, TorenAgentDigest"
        in caplog.text
    )
    assert "then restart this worker" in caplog.text
    assert not task_failures(await fetch_history(bare, handle.id))

    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "TEMPORAL_NAMESPACE": namespace}
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "setup"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "registered TorenAgent, TorenStatus, TorenPendingApprovals" in out.stdout
    assert "restart running toren workers" in out.stdout  # they looked once, at their start
    assert await search_attributes.missing(bare) == []


def _days(n: int) -> Duration:
    d = Duration()
    d.FromTimedelta(timedelta(days=n))
    return d


async def _connect_when_ready(address: str, namespace: str) -> Client | None:
    try:
        c = await connect(target_host=address, namespace=namespace)
        await c.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
        return c
    except Exception:
        return None


async def test_the_inbox_lists_only_running_runs_and_checks_agent_names(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]}, "done"],
    )
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "go")
        listed = await wait_for(lambda: toren_client.inbox(client, agent=folder.name), timeout=30)
        assert [i.run_id for i in listed] == [handle.id]
        await handle.terminate("gone")
        # Its TorenStatus stays "waiting_approval" (a terminated run upserts nothing more).
        await wait_for(lambda: _empty(toren_client.inbox(client, agent=folder.name)), timeout=30)
        desc = await handle.describe()
        assert desc.typed_search_attributes.get(STATUS) == "waiting_approval"
    for bad in ['x" OR TorenAgent != "y', "Support", ""]:
        with pytest.raises(UsageError, match="is not an agent name"):
            await toren_client.inbox(client, agent=bad)


async def test_attributes_of_the_wrong_type_are_skipped_with_a_warning(
    client: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    namespace = f"typo-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=_days(1))
    )
    wrong = await wait_for(lambda: _connect_when_ready(dev_server.address, namespace), timeout=60)
    await wrong.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=namespace,
            search_attributes={
                "TorenAgent": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
                "TorenStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
                "TorenPendingApprovals": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
            },
        )
    )
    folder = make_agent(
        tools={"gated": GATED},
        script=[{"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]}, "done"],
    )
    caplog.set_level(logging.WARNING, logger="toren")
    async with serve(wrong, [folder]):
        handle = await toren_client.start_run(wrong, folder.name, "go")
        await wait_for(lambda: toren_client.pending(wrong, handle.id))
        await toren_client.approve(wrong, handle.id, "g1")
        result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.text == "done"
    assert "TorenPendingApprovals is registered as Keyword but toren needs Int" in caplog.text
    assert not task_failures(await fetch_history(wrong, handle.id))
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(STATUS) == "completed"  # the right ones are set


async def test_a_run_started_with_its_status_upserts_only_what_changes(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # toren.client starts a run with its status set, so the run's first workflow task upserts
    # nothing (one event and one visibility write less per run); a run started by any other
    # client (here the plain Temporal one) upserts all three itself, as before.
    folder = make_agent(script=["done"])
    async with serve(client, [folder]):
        started = await toren_client.start_run(client, folder.name, "go")
        await result_of(started)
        plain = await client.start_workflow(
            "AgentRun",
            {"agent": folder.name, "prompt": "go"},
            id=f"plain-{uuid.uuid4().hex[:8]}",
            task_queue=folder.name,
        )
        await result_of(plain)
    upserted = {}
    for name, handle in (("toren", started), ("plain", plain)):
        history = await handle.fetch_history()
        assert not task_failures(history)
        upserted[name] = [
            sorted(
                e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            )
            for e in history.events
            if e.HasField("upsert_workflow_search_attributes_event_attributes")
        ]
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(AGENT) == folder.name
        assert attributes.get(STATUS) == "completed"
        assert attributes.get(PENDING) == 0
    # The agent's digest rides along with the first upsert of each; it never makes one.
    assert upserted == {
        "toren": [["TorenAgentDigest", "TorenStatus"]],
        "plain": [
            ["TorenAgent", "TorenAgentDigest", "TorenPendingApprovals", "TorenStatus"],
            ["TorenStatus"],
        ],
    }
