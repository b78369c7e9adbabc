"""`toren deploy check`: an agent's runs and threads in flight, replayed against this code.

What a worker without Worker Versioning does at each workflow's next task, before the deploy:
runs and threads this code still replays say ok, one recorded by changed workflow code says
BREAKS, and a check that cannot run says why with exit status 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RawValue

from tests.conftest import DevServer, result_of
from tests.test_codec import ONE_LINE, team_converter
from toren import client as toren_client
from toren.agent._types import RunResult
from toren.connect._plugin import TorenPlugin
from toren.testing import ScriptedModel, temporal_cli
from toren.worker import serve
from toren.workflows import AgentRun
from toren.workflows._input import one_raw_input

ROOT = Path(__file__).resolve().parent.parent

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "ran")
"""


def _gated_when_asked(messages: list[dict[str, Any]]) -> str | dict[str, Any]:
    """Call the gated tool when the prompt says so, else answer at once."""
    asked = any("gated" in str(m.get("content")) for m in messages if m.get("role") == "user")
    return {"tool_calls": [{"id": "g1", "name": "gated", "args": {}}]} if asked else "done"


def _model() -> dict[str, ScriptedModel]:
    return {"mock/scripted": ScriptedModel([_gated_when_asked, "done"])}


@workflow.defn(name="AgentRun", sandboxed=False)  # this module reads files at import
class ChangedRun(AgentRun):
    """`AgentRun` as a careless change would leave it: a timer before the loop, unpatched."""

    @workflow.run
    @one_raw_input
    async def run(self, *args: RawValue) -> RunResult:
        return await super().run(*args)

    async def _loop(self) -> RunResult:
        await workflow.sleep(timedelta(milliseconds=10))
        return await super()._loop()


async def _deploy_check(
    address: str, *args: str, **env_vars: str
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TOREN_"))}
    env = {**base, "TEMPORAL_ADDRESS": address, "PYTHONPATH": str(ROOT), **env_vars}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "deploy", "check", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def _lines(out: subprocess.CompletedProcess[str], workflow_id: str) -> list[list[str]]:
    """The words of each line that ends with `workflow_id` (an ok line)."""
    return [line.split() for line in out.stdout.splitlines() if line.endswith(workflow_id)]


async def test_a_completed_run_a_parked_run_and_a_resting_thread_replay(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    folder = make_agent(tools={"gated": GATED}, limits={"continueAsNewAfterEvents": 100})
    async with serve(client, [folder], models=_model()):
        done = await toren_client.start_run(client, folder.name, "hi")
        await result_of(done)
        parked = await toren_client.start_run(client, folder.name, "gated, please")
        await toren_client.wait_for_approval(client, parked.id)
        thread = await toren_client.start_thread(client, folder.name)
        # Until it continues as new at rest: only its current run is what a worker replays.
        for n in range(12):
            await toren_client.send_message(client, thread.id, f"hi {n}")
            chain = await toren_client.histories(client, thread.id)
            if len(chain) > 1:
                break
        assert len(chain) > 1, "the thread should have continued as new"

    out = await _deploy_check(dev_server.address, str(folder))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"agent {folder.name} ({folder}): 2 running, 1 closed within 7d" in out.stdout
    assert _lines(out, done.id) == [["ok", "closed", "run", done.id]]
    assert _lines(out, parked.id) == [["ok", "running", "run", parked.id]]
    assert _lines(out, thread.id) == [["ok", "running", "thread", thread.id]]
    assert "3 of 3 replay against this code" in out.stdout and "BREAKS" not in out.stdout

    out = await _deploy_check(dev_server.address, str(folder), "--json", "--limit", "2")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    # Running ones first: the limit leaves out the closed run.
    assert {
        (w["id"], w["run_id"], w["type"], w["status"], w["ok"]) for w in report["workflows"]
    } == {
        (parked.id, parked.result_run_id, "run", "running", True),
        (thread.id, chain[-1].run_id, "thread", "running", True),
    }
    assert report["totals"] == {
        "workflows": 2, "ok": 2, "breaks": 0, "breaks_running": 0, "breaks_closed": 0,
    }  # fmt: skip
    assert report["ok"] is True and report["agents"] == [
        {"agent": folder.name, "folder": str(folder)}
    ]
    for run in (parked, thread):
        await run.terminate("test done")


async def test_a_run_recorded_by_changed_workflow_code_breaks(
    client: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = make_agent(tools={"gated": GATED})
    async with serve(client, [folder], models=_model()):
        kept = await toren_client.start_run(client, folder.name, "gated, please")
        await toren_client.wait_for_approval(client, kept.id)
    # The worker of the last deploy ran a changed `AgentRun` on the agent's task queue (its
    # client without toren's plugin, which would add today's `AgentRun` beside it).
    worker_client = await Client.connect(
        dev_server.address, data_converter=TorenPlugin().converter()
    )
    monkeypatch.setattr("toren.worker.AgentRun", ChangedRun)
    async with serve(worker_client, [folder], models=_model()):
        changed = await toren_client.start_run(client, folder.name, "gated, please")
        await toren_client.wait_for_approval(client, changed.id)
    monkeypatch.undo()

    out = await _deploy_check(dev_server.address, str(folder))
    assert out.returncode == 1, out.stdout + out.stderr
    assert _lines(out, kept.id) == [["ok", "running", "run", kept.id]]
    broken = next(line for line in out.stdout.splitlines() if changed.id in line)
    assert broken.split()[:4] == ["BREAKS", "running", "run", f"{changed.id}:"]
    assert "Nondeterminism" in broken and "Timer" in broken, broken
    assert "1 of 2 replay against this code; 1 BREAKS (1 running, 0 closed)" in out.stdout
    assert "workflow.patched" in out.stdout and "--deployment NAME --build-id ID" in out.stdout
    assert "only for an\n    unversioned deploy" in out.stdout
    assert "A closed one" not in out.stdout  # none closed
    assert "Traceback" not in out.stderr

    # Closed, it still breaks: a query would replay it, and runs past the change break alike.
    for run in (kept, changed):
        await run.terminate("test done")
    out = await _deploy_check(dev_server.address, str(folder), "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    verdicts = {w["id"]: (w["status"], w["ok"], w["error"]) for w in report["workflows"]}
    assert verdicts[kept.id] == ("closed", True, None)
    assert verdicts[changed.id][:2] == ("closed", False)
    assert "Nondeterminism" in verdicts[changed.id][2]
    assert report["totals"]["breaks"] == report["totals"]["breaks_closed"] == 1
    assert report["ok"] is False


async def test_what_it_cannot_check_it_says_and_an_agent_with_no_runs_is_no_break(
    make_agent: Callable[..., Path], dev_server: DevServer, tmp_path: Path
) -> None:
    out = await _deploy_check(dev_server.address, str(tmp_path / "nope"))
    assert out.returncode == 2
    assert (
        out.stderr
        == f"toren: no agent folder at {tmp_path / 'nope'} (give the folder that holds agent.yaml)\n"
    )
    (tmp_path / "empty").mkdir()
    out = await _deploy_check(dev_server.address, str(tmp_path / "empty"))
    assert out.returncode == 2 and "has no agent.yaml" in out.stderr, out.stderr

    # Its tools are not imported: one that would fail to load does not stop the check.
    folder = make_agent(tools={"broken": "raise RuntimeError('not imported')"})
    out = await _deploy_check(dev_server.address, str(folder))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        f"agent {folder.name} ({folder}): no run or thread running or closed within 7d",
        "nothing to replay: no run or thread of these agents is in flight or closed lately",
    ]

    # A namespace where runs carry no `TorenAgent`: no search finds them, so it says so.
    bare = f"bare-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(
        subprocess.run,
        [temporal_cli(), "operator", "namespace", "create", "-n", bare, "--address", dev_server.address],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    out = await _deploy_check(dev_server.address, str(folder), TEMPORAL_NAMESPACE=bare)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"toren: namespace '{bare}' has no search attribute TorenAgent")
    assert "run `toren setup`" in out.stderr and "Traceback" not in out.stderr

    out = await _deploy_check("127.0.0.1:7999", str(folder))
    assert out.returncode == 2 and "no Temporal server answers at 127.0.0.1:7999" in out.stderr
    assert "Traceback" not in out.stderr


async def test_an_encrypted_namespace_replays_through_the_teams_codec(
    make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    team = await Client.connect(
        dev_server.address, data_converter=team_converter(), plugins=[TorenPlugin()]
    )
    folder = make_agent(tools={"gated": GATED})
    async with serve(team, [folder], models=_model()):
        parked = await toren_client.start_run(team, folder.name, "gated, please")
        await toren_client.wait_for_approval(team, parked.id)
    no_profile = {"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}

    out = await _deploy_check(dev_server.address, str(folder), **no_profile)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert ONE_LINE in out.stderr and "Traceback" not in out.stderr

    out = await _deploy_check(
        dev_server.address, str(folder), "--codec", "tests.team_codec:codec", **no_profile
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert _lines(out, parked.id) == [["ok", "running", "run", parked.id]]
    await parked.terminate("test done")


async def test_a_run_whose_first_task_is_not_scheduled_yet_replays(tmp_path: Path) -> None:
    # A thread that just continued as new is one event long until its first task: the SDK's
    # replayer waits on such a history forever, so `toren replay` and the check hung on it.
    plain = WorkflowHistory.from_json("plain", (ROOT / "tests/histories/plain.json").read_text())
    started = tmp_path / "started_only.json"
    started.write_text(json.dumps({"events": [plain.to_json_dict()["events"][0]]}))
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "replay", str(started)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "ok      started_only: 1 events replay",
        "1 of 1 histories replay against this code",
    ]
