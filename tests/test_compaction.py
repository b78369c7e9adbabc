"""Threads that outlive the context window (issue 39): compaction against a server with a window.

The fake server (`bench/faults/fake_window.py`) refuses a prompt past its window with OpenAI's
words and logs what the model was shown; the run must answer every message anyway, overflow at
most once (never when agent.yaml gives the window), show the model its summary, and keep every
message readable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from bench.faults.fake_window import FakeWindow
from tests.conftest import fetch_history, result_of, task_failures
from toren import AgentRun, AgentThread
from toren import client as toren_client
from toren.agent._context_plan import is_length_refusal, refused_window, view
from toren.cli import main as toren_main
from toren.client._events import render
from toren.connect._plugin import TorenPlugin, workflow_runner
from toren.worker import serve

HISTORY = Path(__file__).parent / "histories" / "issue39" / "thread_compaction.json"
"""A thread that compacted (by itself, then by hand), recorded by `test_compact_by_hand_at_rest`
with `TOREN_RECORD_HISTORY=1`; outside `histories/`'s own glob, whose replay test expects runs."""

LOG_TOOL = """
from toren import define_tool

def fetch(args, ctx):
    return f"log {args.get('n', 0)}: " + "line of a long log " * 265  # about 5 KB

tool = define_tool(description="Fetch a log.", input={"type": "object", "properties": {"n": {"type": "integer"}}}, handler=fetch)
"""
PASTED = "Here is what I see: " + "a pasted stack frame " * 55
"""A user's message of about 1.2 KB: what the elision of tool results cannot shorten."""


@pytest.fixture
def fake() -> Iterator[FakeWindow]:
    server = FakeWindow(window_chars=32_000).start()
    yield server
    server.stop()


def _agent(make_agent: Callable[..., Path], **config: Any) -> Path:
    return make_agent(
        tools={"fetch_log": LOG_TOOL},
        model="openai/fake",
        stream=False,
        modelRetry={"initialIntervalS": 0.1, "maxIntervalS": 0.2},
        **config,
    )


def _serve(client: Client, folder: Path, fake: FakeWindow) -> Any:
    environ = {"OPENAI_API_KEY": "sk-test-window", "OPENAI_BASE_URL": fake.base_url}
    return serve(client, [folder], environ=environ)


def _summarised(fake: FakeWindow) -> list[str]:
    """The summaries shown to the model in its prompts, in order of first appearance."""
    seen: list[str] = []
    for shown in fake.shown:
        if shown.summary:
            continue
        for message in shown.messages:
            text = str(message.get("content") or "")
            if message.get("role") == "user" and "SUMMARY-" in text:
                summary = text[text.index("SUMMARY-") :]
                if summary not in seen:
                    seen.append(summary)
    return seen


@pytest.mark.parametrize("window", [None, 8_000], ids=["learned", "configured"])
async def test_a_long_thread_compacts_and_answers_every_message(
    client: Client, make_agent: Callable[..., Path], fake: FakeWindow, window: int | None
) -> None:
    messages = 24
    context = {"window": window} if window else {}
    folder = _agent(make_agent, context=context, limits={"continueAsNewAfterEvents": 100})
    async with _serve(client, folder, fake):
        thread = await toren_client.start_thread(client, folder.name)
        for n in range(messages):
            answer = await toren_client.send_message(client, thread.id, f"{PASTED} m{n}")
            assert answer["status"] == "completed", answer
            assert answer["text"] == f"answer to {PASTED[-(40 - len(f' m{n}')) :]} m{n}"
        conversation = await toren_client.messages(client, thread.id)
        await toren_client.close_thread(client, thread.id)
    # Nothing is lost: user, tool call, tool result, answer, for every message.
    assert len(conversation) == 4 * messages
    assert [m["content"] for m in conversation if m["role"] == "user"] == [
        f"{PASTED} m{n}" for n in range(messages)
    ]
    assert fake.count("refused") == (1 if window is None else 0)
    # Every prompt the model answered fit, and after a fold it held the model's summary.
    assert max(s.chars for s in fake.shown if s.outcome != "refused") <= fake.window_chars
    summaries = _summarised(fake)
    assert summaries and fake.count("summary") >= 1
    last_prompt = next(s for s in reversed(fake.shown) if not s.summary)
    assert "SUMMARY-" in json.dumps(last_prompt.messages)
    assert not task_failures(await fetch_history(client, thread.id))


async def test_sixty_tool_calls_in_one_turn_finish_and_a_failing_summary_is_retried(
    client: Client, make_agent: Callable[..., Path], fake: FakeWindow
) -> None:
    fake.loop, fake.fail_summaries = 60, 2
    folder = _agent(make_agent, limits={"maxStepsPerTask": 100})
    async with _serve(client, folder, fake):
        run = await toren_client.start_run(client, folder.name, "Read the logs, all of them.")
        result = await result_of(run)
    assert result.tool_calls == 60
    assert result.text.startswith("answer to")
    assert fake.count("refused") <= 1
    assert fake.count("failed") == 2  # the summary's first two attempts; the third wrote it
    history = await fetch_history(client, run.id)
    events = render(history)
    compacted = [e for e in events if e["type"] == "ContextCompacted"]
    assert compacted and compacted[0]["tokensAfter"] < compacted[0]["tokensBefore"]
    receipt = next(e for e in events if e["type"] == "Receipt")
    assert receipt["calls"] == fake.count("tool") + fake.count("text") + fake.count("summary")


async def test_compact_by_hand_at_rest(
    client: Client, make_agent: Callable[..., Path], fake: FakeWindow
) -> None:
    # A window where the third message's tool result passes the threshold: the run elides.
    folder = _agent(make_agent, context={"keepLastMessages": 2, "window": 4_000})
    async with _serve(client, folder, fake):
        thread = await toren_client.start_thread(client, folder.name)
        for n in range(3):
            await toren_client.send_message(client, thread.id, f"question {n}")
        outcome = await thread.execute_update(
            "compact", {"instructions": "Keep only the log numbers."}
        )
        answer = await toren_client.send_message(client, thread.id, "and now?")
        conversation = await toren_client.messages(client, thread.id)
        await toren_client.close_thread(client, thread.id)
        if os.environ.get("TOREN_RECORD_HISTORY"):
            await _record(client, thread.id)
    assert outcome["compacted"] and outcome["messages_folded"] == 8  # two whole exchanges
    assert outcome["summary"].startswith("SUMMARY-1")
    summarising = next(s for s in fake.shown if s.summary)
    assert summarising.messages[0] == {"role": "system", "content": "Keep only the log numbers."}
    assert answer["status"] == "completed"
    assert "SUMMARY-1" in json.dumps(fake.shown[-1].messages)
    assert len(conversation) == 16


def test_a_recorded_compacting_thread_replays_and_shows_its_compactions() -> None:
    history = WorkflowHistory.from_json("thread_compaction", HISTORY.read_text())
    compacted = [e for e in render(history) if e["type"] == "ContextCompacted"]
    assert [bool(e.get("summary")) for e in compacted] == [False, True]  # elided, then folded


async def test_the_recorded_history_replays() -> None:
    history = WorkflowHistory.from_json("thread_compaction", HISTORY.read_text())
    replayer = Replayer(
        workflows=[AgentRun, AgentThread],
        workflow_runner=workflow_runner(),
        data_converter=TorenPlugin().converter(),
    )
    await replayer.replay_workflow(history)


def test_bad_context_settings_fail_check(
    make_agent: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_agent(context={"window": 10, "compactAt": 2, "keepLast": 3})
    assert toren_main(["check", str(folder)]) == 1
    err = capsys.readouterr().err
    for key in ("context.window", "context.compactAt", "context.keepLast"):
        assert key in err, err


def test_the_plan_renders_the_models_view() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "t"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "t", "content": "x" * 3000},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "name": "t"}]},
        {"role": "tool", "tool_call_id": "c2", "name": "t", "content": "y" * 3000},
    ]
    shown = view(messages, {"fold_end": 4, "summary": "S", "elided": [6]})
    assert shown[0]["role"] == "user" and shown[0]["content"].endswith("S")
    assert shown[1] == messages[4]
    assert "3000 characters was elided" in shown[3]["content"]
    assert view(messages, None) is messages
    openai = "This model's maximum context length is 8000 tokens. However, your messages ..."
    anthropic = "prompt is too long: 210000 tokens > 200000 maximum"
    assert is_length_refusal("ModelHTTPError", openai) and refused_window(openai) == 8000
    assert is_length_refusal("ModelHTTPError", anthropic) and refused_window(anthropic) == 200000
    assert is_length_refusal("PromptTooLongError", "")
    assert not is_length_refusal("ModelHTTPError", "HTTP 429: slow down")


async def _record(client: Client, thread_id: str) -> None:
    history = await client.get_workflow_handle(thread_id).fetch_history()
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    HISTORY.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")


STRATEGY = """
def newest_two(messages):
    # The agent's own view: only the last two messages, marked so the test can tell.
    return [{"role": "user", "content": "OWN-VIEW"}] + messages[-2:]
"""


async def test_an_agents_own_strategy_shapes_what_the_model_is_shown(
    client: Client, make_agent: Callable[..., Path], fake: FakeWindow
) -> None:
    folder = _agent(make_agent, context={"strategy": "shaping:newest_two"})
    (folder / "shaping.py").write_text(STRATEGY)
    async with _serve(client, folder, fake):
        thread = await toren_client.start_thread(client, folder.name)
        for n in range(3):
            answer = await toren_client.send_message(client, thread.id, f"{PASTED} m{n}")
            assert answer["status"] == "completed", answer
        conversation = await toren_client.messages(client, thread.id)
        await toren_client.close_thread(client, thread.id)
    prompts = [s for s in fake.shown if not s.summary]
    # The system prompt, then what the agent's function returned.
    assert prompts and all(s.messages[1]["content"] == "OWN-VIEW" for s in prompts)
    # At most the marker and the two newest (the first call's transcript has one message),
    # though the last prompts' transcripts held ten and more.
    assert [len(s.messages) for s in prompts] == [3] + [4] * (len(prompts) - 1)
    assert fake.count("summary") == 0  # toren's own compaction is off
    assert len(conversation) == 4 * 3  # the conversation itself is whole


@pytest.mark.parametrize(
    ("strategy", "file", "says"),
    [
        ("no colon", None, "context.strategy"),
        ("missing:fn", None, "no file missing.py beside agent.yaml"),
        ("shaping:absent", "def other(m):\n    return m\n", "has no function 'absent'"),
        ("shaping:fn", "raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
    ],
)
def test_a_bad_strategy_fails_check_naming_it(
    make_agent: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    strategy: str,
    file: str | None,
    says: str,
) -> None:
    folder = make_agent(context={"strategy": strategy})
    if file is not None:
        (folder / "shaping.py").write_text(file)
    assert toren_main(["check", str(folder)]) == 1
    assert says in capsys.readouterr().err
