"""Committed histories of every path of AgentRun and AgentThread replay against the current code.

A change to the workflow's command sequence that breaks one of these is a change that would
wedge runs in flight: guard it with `workflow.patched` and keep the old history here.
Regenerate new paths with `python -m tests.histories.make <path>`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from toren import AgentRun, AgentThread
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner

HERE = Path(__file__).parent / "histories"
HISTORIES = sorted(HERE.glob("*.json"))

EXPECTED_END = {
    "budget_exhausted": "RunFailed",
    "local_fail_closed_unpatched": "RunFailed",  # before `toren-local-tool-fails-closed`
    "cancelled_mid_tool_unpatched": "RunFailed",  # before `toren-cancel-ends-cancelled`
    "continue_as_new.0": "RunContinuedAsNew",
    "continue_as_new.1": "RunContinuedAsNew",
    "continue_as_new.2": "RunContinuedAsNew",
    "thread_continue_as_new.0": "RunContinuedAsNew",
    "thread_approval": "ThreadClosed",
    "thread_continue_as_new.1": "ThreadClosed",
    "thread_idle": "ThreadClosed",
    "thread_tool_call_as_text": "ThreadClosed",
    "thread_tool_call_as_text_unpatched": "ThreadClosed",
    "thread_two_messages": "ThreadClosed",
}


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def test_every_path_has_a_history() -> None:
    names = {p.stem.split(".")[0] for p in HISTORIES}
    assert names >= {
        "plain", "parallel_tools", "approval_granted", "approval_denied", "approval_expired",
        "timeout", "fail_closed", "budget_exhausted", "malformed_signal", "context_powers",
        "continue_as_new", "thread_two_messages", "thread_approval", "thread_continue_as_new",
        "thread_idle", "tool_call_as_text",
    }  # fmt: skip


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    history = load(path)
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)
    kinds = [e["type"] for e in render(history)]
    assert kinds[-1] == EXPECTED_END.get(path.stem, "RunCompleted")
    assert not [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


def test_events_of_each_path(request: pytest.FixtureRequest) -> None:
    def kinds(name: str) -> list[str]:
        return [
            e["type"] for e in render(load(Path(__file__).parent / "histories" / f"{name}.json"))
        ]

    assert "ApprovalResolved" in kinds("approval_granted")
    assert kinds("malformed_signal").count("SignalRefused") == 3
    expired = render(load(Path(__file__).parent / "histories" / "approval_expired.json"))
    resolved = next(e for e in expired if e["type"] == "ApprovalResolved")
    assert resolved["by"] == "toren" and resolved["comment"].startswith("approval expired")
    # A tool call written as text: recorded before `toren-tool-call-as-text` the run ended
    # with it; since then it goes back to the model once.
    as_text = render(load(HERE / "tool_call_as_text_unpatched.json"))
    assert [e.get("sentBack") for e in as_text if e["type"] == "ToolCallAsText"] == [False]
    assert next(e for e in as_text if e["type"] == "RunCompleted")["text"].startswith("<tool_")
    as_text = render(load(HERE / "tool_call_as_text.json"))
    assert [e.get("sentBack") for e in as_text if e["type"] == "ToolCallAsText"] == [True]
    assert next(e for e in as_text if e["type"] == "RunCompleted")["text"] == "done"
    # In a thread: the first message ended with the call as its answer, and now is corrected.
    assert [e["text"] for e in render(load(HERE / "thread_tool_call_as_text_unpatched.json"))
            if e["type"] == "MessageAnswered"][0].startswith("<tool_call>")  # fmt: skip
    thread = render(load(HERE / "thread_tool_call_as_text.json"))
    assert [e["text"] for e in thread if e["type"] == "MessageAnswered"] == ["fixed", "two"]
    assert [e["sentBack"] for e in thread if e["type"] == "ToolCallAsText"] == [True]
    powers = kinds("context_powers")
    for kind in ("ToolInvoked", "StateSet", "ToolEvent", "ToolQueued", "MessageInjected"):
        assert kind in powers


async def test_toren_replay_command_checks_files() -> None:
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "replay", *map(str, HISTORIES[:3])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 of 3 histories replay against this code" in out.stdout


async def test_a_changed_command_sequence_fails_replay(tmp_path: Path) -> None:
    # The guard works: a history whose recorded commands differ from what the code does now
    # (here the model activity's type) is reported, not silently accepted.
    source = Path(__file__).parent / "histories" / "plain.json"
    broken = tmp_path / "broken.json"
    broken.write_text(source.read_text().replace('"toren.call_model"', '"toren.other_model"'))
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "toren.cli", "replay", str(broken)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert "FAILED  broken" in out.stdout and "0 of 1 histories replay" in out.stdout
