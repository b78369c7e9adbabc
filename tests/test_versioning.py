"""Changing an agent while its runs and threads live on, with Temporal Worker Deployments.

Two versions of one agent (same name, same task queue, different tool code and model) served by
workers of two Worker Deployment Versions on the dev server, and `temporal worker deployment
set-current-version` moving the deployment from one to the other, as a team's deploy would:

- a run parked on an approval under v1 finishes on v1's tool code after v2 becomes current;
- a thread at rest on v1 answers its next message on v2;
- a thread in the middle of an execution finishes that execution on v1, then moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from tests.conftest import fetch_history, result_of, task_failures, wait_for
from toren import client as toren_client
from toren.errors import ConfigError
from toren.testing import DevServer, temporal_cli
from toren.worker import serve
from toren.worker.models import ScriptedModel

TOOL = """
from toren import define_tool

tool = define_tool(
    description="Say which code answers.",
    input={{"type": "object", "properties": {{}}}},
    effects="none",
    approval={approval!r},
    handler=lambda args, ctx: "tool {version}",
)
"""


def write_agent(root: Path, name: str, version: str, **config: Any) -> Path:
    """Version `version` of agent `name`: its tools say which version's code ran them."""
    folder = root / version / name
    (folder / "tools").mkdir(parents=True)
    config = {"name": name, "model": "mock/scripted", **config}
    (folder / "agent.yaml").write_text(yaml.safe_dump(config))
    (folder / "instructions.md").write_text(f"You are version {version}.")
    (folder / "mock_script.yaml").write_text("- done\n")
    for tool, approval in (("which", "never"), ("refund", "always")):
        source = TOOL.format(approval=approval, version=version)
        (folder / "tools" / f"{tool}.py").write_text(source)
    return folder


def model(version: str) -> ScriptedModel:
    """A model that calls the tool the user names, then answers with its result."""

    def step(messages: list[dict[str, Any]]) -> dict[str, Any]:
        last = messages[-1]
        if last.get("role") == "tool":
            return {"text": f"model {version}, {{last_tool_result}}"}
        tool = "refund" if "refund" in str(last.get("content")) else "which"
        return {"tool_calls": [{"name": tool, "args": {}}]}

    return ScriptedModel([step] * 40)


async def make_current(server: DevServer, deployment: str, build_id: str) -> None:
    """`temporal worker deployment set-current-version`, once the version's worker has polled."""
    command = [
        temporal_cli(), "worker", "deployment", "set-current-version", "--address",
        server.address, "--deployment-name", deployment, "--build-id", build_id, "--yes",
    ]  # fmt: skip

    async def done() -> bool:
        proc = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
        return proc.returncode == 0

    await wait_for(done, timeout=60, every=0.5)


async def build_id_of(client: Client, workflow_id: str) -> str:
    """The Worker Deployment Version build id the workflow's current run is on."""
    described = await client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


@contextlib.asynccontextmanager
async def worker(
    client: Client, folder: Path, deployment: str, version: str
) -> AsyncIterator[None]:
    async with serve(
        client,
        [folder],
        models={"mock/scripted": model(version)},
        deployment=deployment,
        build_id=version,
    ):
        yield


@pytest.fixture
def versions(tmp_path: Path, agent_name: str) -> tuple[Path, Path, str]:
    return (
        write_agent(tmp_path, agent_name, "v1"),
        write_agent(tmp_path, agent_name, "v2"),
        agent_name.replace("_", "-"),
    )


async def test_a_parked_run_finishes_on_the_version_it_started_on(
    client: Client, dev_server: DevServer, versions: tuple[Path, Path, str]
) -> None:
    v1, v2, deployment = versions
    async with worker(client, v1, deployment, "v1"):
        await make_current(dev_server, deployment, "v1")
        handle = await toren_client.start_run(client, v1.name, "refund me")
        await wait_for(lambda: toren_client.pending(client, handle.id))
        # The Web UI's details say which definition and version the run is on.
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        assert re.search(rf"agent sha256:[0-9a-f]{{16}}; on version {deployment}\.v1", details)
        async with worker(client, v2, deployment, "v2"):
            await make_current(dev_server, deployment, "v2")
            # New runs go to v2 now ...
            fresh = await result_of(toren_client.run_agent(client, v1.name, "which one"))
            assert fresh.text == "model v2, tool v2"
            # ... and the parked one, approved after the deploy, runs v1's tool and model.
            await toren_client.approve(client, handle.id, "call_1_1", by="alice")
            result = await result_of(handle)
            assert result.text == "model v1, tool v1"
            assert await build_id_of(client, handle.id) == "v1"
    history = await fetch_history(client, handle.id)
    assert task_failures(history) == []
    loaded = [e for e in await toren_client.events(client, handle.id) if e["type"] == "AgentLoaded"]
    assert [e["version"] for e in loaded] == [f"{deployment}.v1"]
    # The search attribute names the same definition (it rode the run's status upserts).
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(SearchAttributeKey.for_keyword("TorenAgentDigest")) == loaded[0]["digest"]


@pytest.mark.parametrize("long", [False, True], ids=["short", "continues-mid-execution"])
async def test_a_thread_moves_to_the_current_version_between_messages(
    client: Client, dev_server: DevServer, tmp_path: Path, agent_name: str, long: bool
) -> None:
    """`long`: the parked execution continues as new in its middle, and stays on v1."""
    limits = {"limits": {"continueAsNewAfterEvents": 100}} if long else {}
    v1 = write_agent(tmp_path, agent_name, "v1", **limits)
    v2 = write_agent(tmp_path, agent_name, "v2", **limits)
    deployment = agent_name.replace("_", "-")
    async with worker(client, v1, deployment, "v1"):
        await make_current(dev_server, deployment, "v1")
        thread = await toren_client.start_thread(client, v1.name, user_id="alice")
        first = await toren_client.send_message(client, thread.id, "which one?")
        assert first["text"] == "model v1, tool v1"
        while long and (await thread.describe()).history_length < 80:
            said = await toren_client.send_message(client, thread.id, "which one?")
            assert said["text"] == "model v1, tool v1"
        # The second message parks mid-execution on an approval: a deploy now must not move it.
        second = asyncio.create_task(toren_client.send_message(client, thread.id, "refund"))
        await wait_for(lambda: toren_client.pending(client, thread.id))
        async with worker(client, v2, deployment, "v2"):
            await make_current(dev_server, deployment, "v2")
            calls = await toren_client.pending(client, thread.id)
            await toren_client.approve(client, thread.id, calls[0].call_id, by="alice")
            answered = await result_of(second)
            assert answered["text"] == "model v1, tool v1"  # began on v1: finished on v1
            if not long:  # (a long history continues as new at rest at once, onto v2)
                assert await build_id_of(client, thread.id) == "v1"
            # At rest now: the next message runs on v2's code, in a run on v2.
            third = await toren_client.send_message(client, thread.id, "and now?")
            assert third["text"] == "model v2, tool v2"
            assert await build_id_of(client, thread.id) == "v2"
            fourth = await toren_client.send_message(client, thread.id, "still?")
            assert fourth["text"] == "model v2, tool v2"
            conversation = await toren_client.messages(client, thread.id)
            roles = ["user", "assistant", "tool", "assistant"]  # asked, a call, its result, answer
            assert [m["role"] for m in conversation] == roles * (len(conversation) // 4)
    for history in await toren_client.histories(client, thread.id):
        assert task_failures(history) == []
    events = await toren_client.events(client, thread.id)
    versions = [e["version"] for e in events if e["type"] == "AgentLoaded"]
    if not long:
        assert versions == [f"{deployment}.v1", f"{deployment}.v2"]
        return
    # The refund's execution continued as new after its approval, before its answer: on v1.
    kinds = [e["type"] for e in events]
    resolved = kinds.index("ApprovalResolved")
    answered_at = kinds.index("MessageAnswered", resolved)
    assert "RunContinuedAsNew" in kinds[resolved:answered_at], kinds
    moved = versions.index(f"{deployment}.v2")
    assert versions[:moved] == [f"{deployment}.v1"] * moved and moved >= 2, versions
    assert set(versions[moved:]) == {f"{deployment}.v2"}


async def test_a_resting_thread_told_to_upgrade_frees_the_old_version(
    client: Client, dev_server: DevServer, versions: tuple[Path, Path, str]
) -> None:
    """`toren deploy move-threads` moves a thread at rest (an `upgrade` signal), so v1's
    workers can stop before its next message (else a month-old thread keeps v1 up a month)."""
    v1, v2, deployment = versions
    async with contextlib.AsyncExitStack() as old:
        await old.enter_async_context(worker(client, v1, deployment, "v1"))
        await make_current(dev_server, deployment, "v1")
        thread = await toren_client.start_thread(client, v1.name, user_id="alice")
        first = await toren_client.send_message(client, thread.id, "which one?")
        assert first["text"] == "model v1, tool v1"
        async with worker(client, v2, deployment, "v2"):
            await make_current(dev_server, deployment, "v2")
            # What a team runs after the deploy: each resting thread moves to v2 at once.
            out = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "toren.cli", "deploy", "move-threads", str(v1)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            assert f"moved  {thread.id}: {deployment}.v1 -> {deployment}.v2" in out.stdout
            assert await build_id_of(client, thread.id) == "v2"
            await old.aclose()  # v1's workers stop: nothing is pinned to v1 any more
            second = await toren_client.send_message(client, thread.id, "and now?")
            assert second["text"] == "model v2, tool v2"
            # The whole conversation still reads, v1's turns from the transcript kept in the
            # store when the thread moved (v1's workers, which could replay v1's runs, are gone).
            conversation = await toren_client.messages(client, thread.id)
            assert [m["role"] for m in conversation] == [
                "user",
                "assistant",
                "tool",
                "assistant",
            ] * 2
            assert conversation[0]["content"] == "which one?"
    for history in await toren_client.histories(client, thread.id):
        assert task_failures(history) == []


async def test_worker_deployment_settings_are_checked() -> None:
    from toren.connect._deployment import worker_deployment

    assert worker_deployment(environ={}) is None
    config = worker_deployment(environ={"TOREN_DEPLOYMENT": "support", "TOREN_BUILD_ID": "v2"})
    assert config is not None and config.version.to_canonical_string() == "support.v2"
    with pytest.raises(ConfigError, match="--build-id"):
        worker_deployment("support", environ={})
    with pytest.raises(ConfigError, match="--deployment"):
        worker_deployment(build_id="v2", environ={})
    with pytest.raises(ConfigError, match="no '.'"):
        worker_deployment("sup.port", "v2", environ={})


def test_the_plugin_makes_a_worker_a_pinned_deployment_version() -> None:
    """`TorenPlugin(deployment=, build_id=)` sets the worker's version unless it has its own,
    and a versioned worker's unspecified default becomes PINNED (toren's workflows need it)."""
    from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
    from temporalio.worker import WorkerConfig, WorkerDeploymentConfig

    from toren import TorenPlugin

    config = TorenPlugin(deployment="support", build_id="v3").configure_worker(WorkerConfig())
    versioning = config["deployment_config"]
    assert versioning.version.to_canonical_string() == "support.v3"
    assert versioning.default_versioning_behavior == VersioningBehavior.PINNED
    own = WorkerDeploymentConfig(WorkerDeploymentVersion("team", "b7"), use_worker_versioning=True)
    config = TorenPlugin(deployment="support", build_id="v3").configure_worker(
        WorkerConfig(deployment_config=own)
    )
    assert config["deployment_config"].version.to_canonical_string() == "team.b7"
    assert config["deployment_config"].default_versioning_behavior == VersioningBehavior.PINNED
    assert "deployment_config" not in TorenPlugin().configure_worker(WorkerConfig())


def test_toren_worker_names_a_half_given_version() -> None:
    """`--deployment` without `--build-id` stops `toren worker` at once, naming the flag."""
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "worker", "examples/support", "--deployment", "x"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "TOREN_BUILD_ID": ""},
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "give --build-id ID (or TOREN_BUILD_ID)" in out.stderr
