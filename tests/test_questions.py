"""Asking a person: `ask_human` and `ctx.ask` park the run until an answer arrives.

Answered by the plain Temporal client's signal and update, the `temporal` CLI, `toren answer`
and the HTTP API; a refused answer leaves the question waiting; an unanswered one expires.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.conftest import fetch_history, result_of, task_failures, wait_for
from tests.test_expiry import time_skipping_binary
from toren import client as toren_client
from toren.client._events import render
from toren.connect._plugin import TorenPlugin
from toren.testing import DevServer, temporal_cli
from toren.web import Token, create_app
from toren.worker import serve

ASK_TWICE = """
from toren import define_tool

async def book(args, ctx):
    # Before the asks: runs again on every re-run (the test counts it).
    with open(ctx.env["RUNS_LOG"], "a") as f:
        f.write("run\\n")
    seat = await ctx.ask("Window or aisle?", choices=["window", "aisle"])
    meal = await ctx.ask("Which meal?")
    # After the asks: runs once.
    with open(ctx.env["BOOK_LOG"], "a") as f:
        f.write(f"{seat},{meal}\\n")
    return f"booked {seat} with {meal}"

tool = define_tool(description="Book a seat.", effects="external", handler=book)
"""

EXPIRING = """
from toren import define_tool, QuestionExpired

async def confirm(args, ctx):
    try:
        return await ctx.ask("Ship it?", timeout=3600)
    except QuestionExpired as err:
        return f"not shipped: {err}"

tool = define_tool(description="Confirm.", effects="none", handler=confirm)
"""


def asks(*questions: dict[str, Any]) -> list[Any]:
    """A script: one `ask_human` call per step, then a reply quoting every result."""
    steps: list[Any] = [
        {"tool_calls": [{"id": f"ask{i}", "name": "ask_human", "args": q}]}
        for i, q in enumerate(questions, 1)
    ]
    return [*steps, "done"]


async def waiting(client: Client, run_id: str, question_id: str) -> list[Any]:
    async def check() -> list[Any] | None:
        qs = await toren_client.pending_questions(client, run_id)
        return qs if any(q.question_id == question_id for q in qs) else None

    found: list[Any] = await wait_for(check)
    return found


async def run_cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, list(args), capture_output=True, text=True, timeout=60, env=env
    )


async def test_ask_human_answered_by_signal_cli_toren_and_http(
    client: Client, dev_server: DevServer, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        builtin_tools=["ask_human"],
        script=asks(
            {"question": "Which colour?", "choices": ["red", "blue"]},
            {"question": "Which size?"},
            {"question": "Gift wrap?", "choices": ["yes", "no"]},
            {"question": "Note?"},
            {"question": "Deliver when?"},
        ),
    )
    app = create_app(client, tokens=[Token("tok-alice")])
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "order a shirt")
        plain: WorkflowHandle[Any, Any] = client.get_workflow_handle(handle.id)

        # 1. The plain Temporal client's signal; a wrong choice and junk first are refused.
        [q] = await waiting(client, handle.id, "q_ask1_1")
        assert (q.question, q.choices, q.tool, q.call_id) == ("Which colour?", ["red", "blue"],
                                                              "ask_human", "ask1")  # fmt: skip
        await plain.signal("answer", {"question_id": "q_ask1_1", "text": "green", "by": "al"})
        await plain.signal("answer", {"question_id": "q_nope_1", "text": "red"})
        await plain.signal("answer", {"question_id": "q_ask1_1", "text": ""})
        await plain.signal("answer")
        refused = await wait_for(lambda: _at_least(plain.query("refused_signals"), 4))
        assert [r["reason"] for r in refused] == [
            "\"text\" must be one of the choices: 'red', 'blue'",
            "unknown question_id 'q_nope_1' (waiting: q_ask1_1)",
            '"text" must be a non-empty string (your answer), got an empty one',
            "expected one JSON object, got an empty payload",
        ]
        assert [q.question_id for q in await toren_client.pending_questions(client, handle.id)] \
            == ["q_ask1_1"]  # still waiting  # fmt: skip
        details = (await plain.query("__temporal_workflow_metadata")).current_details
        assert '{"question_id": "q_ask1_1", "text": "red", "by": "your-name"}' in details
        assert "> Which colour?" in details and "choose `answer`" in details
        items = await wait_for(lambda: _inbox_has(client, folder.name, "q_ask1_1"))
        assert items[0].run_id == handle.id and items[0].question.question == "Which colour?"
        await plain.signal("answer", {"question_id": "q_ask1_1", "text": "blue", "by": "al"})

        # 2. The `temporal` CLI.
        await waiting(client, handle.id, "q_ask2_1")
        out = await run_cli(
            temporal_cli(), "workflow", "signal", "--address", dev_server.address,
            "--workflow-id", handle.id, "--name", "answer",
            "--input", json.dumps({"question_id": "q_ask2_1", "text": "L", "by": "cli-user"}),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr

        # 3. `toren answer`: a wrong choice is refused with the reason, then the right one.
        await waiting(client, handle.id, "q_ask3_1")
        env = {"TEMPORAL_ADDRESS": dev_server.address, "PATH": "/usr/bin:/bin"}
        out = await run_cli(sys.executable, "-m", "toren.cli", "pending", handle.id,
                            env=env)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert 'asks: "Gift wrap?"  choices: yes, no' in out.stdout
        assert f'toren answer {handle.id} q_ask3_1 "yes"' in out.stdout
        toren = [sys.executable, "-m", "toren.cli", "answer", handle.id, "q_ask3_1"]
        out = await run_cli(*toren, "maybe", "--by", "bo", env=env)
        assert out.returncode == 1 and "must be one of the choices" in out.stderr, out
        out = await run_cli(*toren, "yes", "--by", "bo", env=env)
        assert out.returncode == 0, out.stderr
        assert "q_ask3_1 answered by bo: yes" in out.stdout

        # 4. HTTP: `by` is the token's name; the run view lists the waiting question.
        await waiting(client, handle.id, "q_ask4_1")
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": "Bearer tok-alice"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as http:
            view = (await http.get(f"/v1/runs/{handle.id}")).json()
            assert [q["question_id"] for q in view["pending_questions"]] == ["q_ask4_1"]
            bad = await http.post(f"/v1/runs/{handle.id}/answers", json={"question_id": "q_ask4_1"})
            assert bad.status_code == 422 and bad.json()["field"] == "text", bad.text
            wrong = await http.post(
                f"/v1/runs/{handle.id}/answers", json={"question_id": "q_ask9_1", "text": "x"}
            )
            assert wrong.status_code == 409 and "unknown question_id" in wrong.text, wrong.text
            r = await http.post(
                f"/v1/runs/{handle.id}/answers",
                json={"question_id": "q_ask4_1", "text": "fragile", "by": "alice"},
            )
            assert r.status_code == 200, r.text
            assert r.json()["by"] == "alice" and r.json()["text"] == "fragile"

        # 5. The update through the plain client, and `toren.client.answer`'s refusal.
        await waiting(client, handle.id, "q_ask5_1")
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await toren_client.answer(client, handle.id, "q_ask1_1", "red", by="late")
        assert "already answered" in str(info.value.cause)
        answer = await plain.execute_update(
            "answer", {"question_id": "q_ask5_1", "text": "Monday", "by": "dee"}
        )
        assert answer["text"] == "Monday" and answer["via"] == "update"
        result = await result_of(handle)
        history = await fetch_history(client, handle.id)
        transcript = await plain.query("transcript")

    assert result.text == "done"
    answers = [json.loads(m["content"]) for m in transcript if m.get("role") == "tool"]
    assert answers == [
        {"answer": "blue", "by": "al"},
        {"answer": "L", "by": "cli-user"},
        {"answer": "yes", "by": "bo"},
        {"answer": "fragile", "by": "alice"},
        {"answer": "Monday", "by": "dee"},
    ]
    assert not task_failures(history)
    events = render(history)
    asked = [e for e in events if e["type"] == "QuestionAsked"]
    answered = [e for e in events if e["type"] == "QuestionAnswered"]
    assert [e["questionId"] for e in asked] == [f"q_ask{i}_1" for i in range(1, 6)]
    assert [(e["text"], e["by"]) for e in answered][:2] == [("blue", "al"), ("L", "cli-user")]


async def test_ctx_ask_twice_runs_the_effect_once(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    runs, booked = tmp_path / "runs.log", tmp_path / "book.log"
    folder = make_agent(
        tools={"book": ASK_TWICE},
        script=[
            {"tool_calls": [{"id": "b1", "name": "book", "args": {}}]},
            "model saw: {last_tool_result}",
        ],
        env={"required": ["RUNS_LOG", "BOOK_LOG"]},
    )
    environ = {"RUNS_LOG": str(runs), "BOOK_LOG": str(booked)}
    async with serve(client, [folder], environ=environ):
        handle = await toren_client.start_run(client, folder.name, "book me")
        [q] = await waiting(client, handle.id, "q_b1_1")
        assert q.question == "Window or aisle?" and q.choices == ["window", "aisle"]
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await toren_client.answer(client, handle.id, "q_b1_1", "middle", by="al")
        assert "one of the choices" in str(info.value.cause)
        got = await toren_client.answer(client, handle.id, "q_b1_1", "aisle", by="al")
        assert got.text == "aisle" and got.by == "al"
        [q] = await waiting(client, handle.id, "q_b1_2")
        assert q.question == "Which meal?" and q.choices is None
        await client.get_workflow_handle(handle.id).signal(
            "answer", {"question_id": "q_b1_2", "text": "vegan", "by": "bo"}
        )
        result = await result_of(handle)
        history = await fetch_history(client, handle.id)
    assert result.text == "model saw: booked aisle with vegan"
    assert runs.read_text().splitlines() == ["run", "run", "run"]  # once per question, + last
    assert booked.read_text().splitlines() == ["aisle,vegan"]  # the effect ran once
    assert not task_failures(history)


@pytest.fixture(scope="module")
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_binary(),
        data_converter=TorenPlugin().converter(),
    )
    yield env
    await env.shutdown()


async def test_unanswered_questions_expire(
    skipping: WorkflowEnvironment, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(
        tools={"confirm": EXPIRING},
        builtin_tools=["ask_human"],
        limits={"approvalTimeoutMin": 120},
        script=[
            {"tool_calls": [{"id": "h", "name": "ask_human", "args": {"question": "Why?"}},
                            {"id": "c", "name": "confirm", "args": {}}]},
            "done",
        ],
    )  # fmt: skip
    async with serve(skipping.client, [folder]):
        handle = await toren_client.start_run(skipping.client, folder.name, "go")
        await result_of(handle)  # the server skips the hours: nothing else waits
        transcript = await handle.query("transcript")
    results = [(m["content"], m.get("is_error", False)) for m in transcript if m["role"] == "tool"]
    assert results == [
        ("nobody answered within 2h", True),
        ("not shipped: nobody answered 'Ship it?' within 3600 s", False),
    ]


async def _at_least(query: Any, n: int) -> list[Any] | None:
    found: list[Any] = await query
    return found if len(found) >= n else None


async def _inbox_has(client: Client, agent: str, question_id: str) -> list[Any] | None:
    items = await toren_client.question_inbox(client, agent=agent)
    hits = [i for i in items if i.question.question_id == question_id]
    return hits or None
