"""Threads on a real dev server: follow-up messages, queueing, ThreadState powers, bad input."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from tests.conftest import DevServer, fetch_history, result_of, secret, task_failures, wait_for
from toren import client as toren_client
from toren.client._events import render
from toren.errors import RunError, UsageError
from toren.worker import serve
from toren.worker.models import ScriptedModel


def said(messages: list[dict[str, Any]]) -> str:
    """A model step that answers with every user message it was shown, in order."""
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    return "saw: " + " | ".join(users)


def step(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def call(tool: str, id: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "name": tool, "args": args}


async def test_follow_up_messages_see_the_whole_conversation(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent()
    model = ScriptedModel([said] * 25)
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name, user_id="alice")
        first = await toren_client.send_message(client, thread.id, "hello")
        assert first["status"] == "completed"
        assert first["text"] == "saw: hello"
        second = await toren_client.send_message(client, thread.id, "and again")
        assert second["text"] == "saw: hello | and again"
        for n in range(3, 21):
            answer = await toren_client.send_message(client, thread.id, f"m{n}")
        assert answer["text"].endswith("| m19 | m20")
        assert answer["text"].count("|") == 19
        conversation = await toren_client.messages(client, thread.id)
        assert [m["role"] for m in conversation[:4]] == ["user", "assistant", "user", "assistant"]
        assert len(conversation) == 40
        assert await thread.query("execution") is None  # at rest
        result = await toren_client.close_thread(client, thread.id, by="alice")
    assert result is not None
    assert (result.executions, result.messages, result.closed_by) == (20, 40, "close by alice")
    assert not task_failures(await fetch_history(client, thread.id))


async def test_two_messages_sent_at_once_run_one_after_the_other(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    slow = """
import asyncio
from toren import define_tool

async def wait(args, ctx):
    await asyncio.sleep(1)
    return "waited"

tool = define_tool(description="Wait a second.", handler=wait)
"""
    folder = make_agent(tools={"wait": slow})
    # Each execution calls `wait` once, then says what it saw.
    model = ScriptedModel([step(call("wait", "w1")), said, step(call("wait", "w2")), said])
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name)
        a, b = await asyncio.gather(
            toren_client.send_message(client, thread.id, "first", message_id="m-a"),
            toren_client.send_message(client, thread.id, "second", message_id="m-b"),
        )
        # A client retry of the same update id runs nothing again.
        again = await toren_client.send_message(client, thread.id, "first", message_id="m-a")
        conversation = await toren_client.messages(client, thread.id)
    first, second = sorted([a, b], key=lambda o: len(o["text"]))
    assert again == a
    assert first["text"].startswith("saw: ")
    assert second["text"].count("|") == 1
    roles = [m["role"] for m in conversation]
    # No interleaving: each user message is followed by its own execution's turns.
    assert roles == ["user", "assistant", "tool", "assistant"] * 2


async def test_signal_queues_and_close_answers_the_rest(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent()
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel([said] * 5)}):
        thread = await toren_client.start_thread(client, folder.name)
        queued = await toren_client.send_message(client, thread.id, "by signal", wait=False)
        assert queued["status"] == "queued"
        await wait_for(lambda: _executions(thread), timeout=30)
        answer = await toren_client.send_message(client, thread.id, "by update")
        assert answer["text"] == "saw: by signal | by update"
        await toren_client.close_thread(client, thread.id, wait=False)
        result = await result_of(thread)
        with pytest.raises(RunError, match="is closed") as refused:
            await toren_client.send_message(client, thread.id, "too late")
        assert refused.value.kind == "ThreadClosed"
    assert result.executions == 2


async def _executions(thread: Any) -> bool:
    page = await thread.query("messages", args=[0, 10])
    return int(page["total"]) >= 2


async def test_bad_messages_are_refused_by_the_validator_and_record_nothing(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent()
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel([said] * 3)}):
        thread = await toren_client.start_thread(client, folder.name)
        for bad, words in (
            ({}, "missing key 'content'"),
            ({"content": 42}, "'content' must be a string, got a number"),
            ({"content": "  "}, "'content' is empty"),
            ({"content": "x", "attachment": []}, "unknown key(s) 'attachment'"),
            ("hello", "takes a JSON object, got a string"),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as failed:
                await thread.execute_update("send_message", bad)
            assert words in str(failed.value.cause), (bad, failed.value.cause)
        history = await fetch_history(client, thread.id)
        # Refused by the validator: no update was accepted, no event recorded for them.
        assert not [
            e
            for e in history.events
            if e.HasField("workflow_execution_update_accepted_event_attributes")
        ]
        answer = await toren_client.send_message(client, thread.id, "fine")
        assert answer["text"] == "saw: fine"
        await toren_client.close_thread(client, thread.id)


async def test_bad_ids_are_refused_at_start(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent()
    with pytest.raises(UsageError, match="not an identifier"):
        await toren_client.start_thread(client, folder.name, user_id="alice smith")
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel([said])}):
        handle = await client.start_workflow(
            "AgentThread",
            {"agent": folder.name, "user_id": "bad user!"},
            id="thread with spaces",
            task_queue=folder.name,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    text = str(failed.value.cause)
    assert "thread id" in text and "'user_id' 'bad user!' is not an identifier" in text
    assert not task_failures(await fetch_history(client, handle.id))


CONTEXT = """
from toren import define_tool

async def scratch(args, ctx):
    before = dict(ctx.context)
    ctx.context["seen"] = ctx.context.get("seen", 0) + 1
    ex = ctx.execution
    history = await ex.message_history()
    return (f"before={before} user={ctx.user_id} thread={ctx.thread_id == ctx.run_id} "
            f"agent={ctx.agent_id} flow={ex.flow_id.rsplit('#', 1)[-1]} steps={ex.step_count} "
            f"history={[m['role'] for m in history]}")

tool = define_tool(description="Count in scratch.", handler=scratch)
"""

SET_ENV = """
from toren import define_tool

async def keep(args, ctx):
    if args.get("log_in"):
        # As if exchanged with an identity provider: the value never passed through the model.
        ctx.set_env("THREAD_TOKEN", "TOKEN_VALUE")
        ctx.set_env("THREAD_PLAN", "gold", type="text")
        return "kept TOKEN_VALUE"
    token = ctx.env.get("THREAD_TOKEN")
    return (f"token={token} type={ctx.env_type('THREAD_TOKEN')} plan={ctx.env.get('THREAD_PLAN')} "
            f"plan_type={ctx.env_type('THREAD_PLAN')} other={ctx.env_type('NOPE')}")

tool = define_tool(
    description="Keep or read a token.",
    input={"type": "object", "properties": {"log_in": {"type": "boolean"}}},
    handler=keep,
)
"""


async def test_context_is_per_execution_and_execution_counts_steps(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"scratch": CONTEXT})
    model = ScriptedModel(
        [
            step(call("scratch", "a")),
            step(call("scratch", "b")),
            "{last_tool_result}",
            step(call("scratch", "c")),
            "{last_tool_result}",
        ]
    )
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name, user_id="bob")
        first = await toren_client.send_message(client, thread.id, "one")
        second = await toren_client.send_message(client, thread.id, "two")
        assert await thread.query("execution") is None
        await toren_client.close_thread(client, thread.id)
    assert first["text"] == (
        f"before={{'seen': 1}} user=bob thread=True agent={folder.name} flow=1 steps=2 "
        "history=['user', 'assistant', 'tool', 'assistant']"
    )
    assert second["text"].startswith("before={} ")  # scratch starts empty in execution 2
    assert "flow=2 steps=1 history=['user', 'assistant']" in second["text"]


async def test_set_env_reaches_later_executions_and_never_history(
    client: Client, make_agent: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOREN_SECRETS", str(tmp_path / "secrets"))
    token = secret("thr-tok-9f8e7d6c5b4a")
    folder = make_agent(tools={"keep": SET_ENV.replace("TOKEN_VALUE", token)})
    model = ScriptedModel(
        [
            step(call("keep", "k1", log_in=True)),
            "{last_tool_result}",
            step(call("keep", "k2")),
            "{last_tool_result}",
        ]
    )
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name)
        first = await toren_client.send_message(client, thread.id, "keep it")
        second = await toren_client.send_message(client, thread.id, "use it")
        await toren_client.close_thread(client, thread.id)
    assert first["text"] == "kept [redacted]"
    assert second["text"] == "token=[redacted] type=secret plan=gold plan_type=text other=secret"
    history = await fetch_history(client, thread.id)
    raw = History(events=history.events).SerializeToString()  # payloads as they are, not base64
    assert token.encode() not in raw and token not in history.to_json()
    assert b'"ref":"sec_' in raw.replace(b" ", b"")  # the reference, not the value
    stored = list((tmp_path / "secrets").iterdir())
    assert [p.read_text() for p in stored] == [token]
    assert oct(stored[0].stat().st_mode & 0o777) == "0o600"


async def test_a_failed_execution_fails_its_message_not_the_thread(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"scratch": CONTEXT}, limits={"maxStepsPerTask": 1})
    model = ScriptedModel([step(call("scratch", "a")), said, said])
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name)
        with pytest.raises(RunError) as failed:
            await toren_client.send_message(client, thread.id, "loop")
        assert failed.value.kind == "BudgetExceeded"
        answer = await toren_client.send_message(client, thread.id, "next")
        assert answer["status"] == "completed"
        await toren_client.close_thread(client, thread.id)


async def test_a_thread_continued_as_new_keeps_every_message(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"scratch": CONTEXT}, limits={"continueAsNewAfterEvents": 100})
    script: list[Any] = []
    for _ in range(12):
        script += [step(call("scratch", "s")), said]
    async with serve(client, [folder], models={"mock/scripted": ScriptedModel(script)}):
        thread = await toren_client.start_thread(client, folder.name)
        for n in range(1, 13):
            answer = await toren_client.send_message(client, thread.id, f"m{n}")
        assert answer["text"] == "saw: " + " | ".join(f"m{n}" for n in range(1, 13))
        conversation = await toren_client.messages(client, thread.id)
        assert [m["content"] for m in conversation if m["role"] == "user"] == [
            f"m{n}" for n in range(1, 13)
        ]
        histories = await toren_client.histories(client, thread.id)
        await toren_client.close_thread(client, thread.id)
    assert len(histories) >= 3, "the thread should have continued as new at rest"
    sizes = [len(h.events) for h in histories[:-1]]
    assert max(sizes) < 200, sizes


async def test_a_worker_killed_mid_execution_loses_nothing(
    client: Client, make_agent: Callable[..., Path], dev_server: DevServer
) -> None:
    gated = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "gated ran")
"""
    folder = make_agent(
        tools={"gated": gated},
        script=[
            "first answer",
            {"tool_calls": [{"name": "gated", "id": "g1"}]},
            "second {last_tool_result}",
        ],
    )
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    cmd = [sys.executable, "-m", "toren.cli", "worker", str(folder)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    try:
        thread = await toren_client.start_thread(client, folder.name)
        assert (await toren_client.send_message(client, thread.id, "one"))["text"] == "first answer"
        sending = asyncio.ensure_future(toren_client.send_message(client, thread.id, "two"))
        await toren_client.wait_for_approval(client, thread.id, timeout=60)
        first.send_signal(signal.SIGKILL)
        first.wait()
        # A signal: an update would wait for a worker, and none runs yet.
        await thread.signal("approve", {"call_id": "g1", "by": "ops"})
        second = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        answer = await asyncio.wait_for(sending, timeout=90)
        assert answer["text"] == "second gated ran"
        conversation = await toren_client.messages(client, thread.id)
        assert [m["role"] for m in conversation] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        await toren_client.close_thread(client, thread.id)
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert not task_failures(await fetch_history(client, thread.id))


async def test_close_cancels_an_execution_parked_on_an_approval(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    gated = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "ran")
"""
    folder = make_agent(tools={"gated": gated})
    model = ScriptedModel([step(call("gated", "g1")), "never"])
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name)
        sending = asyncio.ensure_future(toren_client.send_message(client, thread.id, "go"))
        await toren_client.wait_for_approval(client, thread.id, timeout=30)
        # A thread's waiting call is in the inbox like a run's (visibility lags a little).
        waiting = await wait_for(lambda: toren_client.inbox(client, folder.name), timeout=30)
        assert [(i.run_id, i.call.call_id) for i in waiting] == [(thread.id, "g1")]
        await toren_client.close_thread(client, thread.id, by="ops", wait=False)
        with pytest.raises(RunError, match="closed") as failed:
            await asyncio.wait_for(sending, timeout=30)
        assert failed.value.kind == "ThreadClosed"
        result = await result_of(thread)
    assert (result.executions, result.closed_by) == (1, "close by ops")
    history = await fetch_history(client, thread.id)
    assert not task_failures(history)
    assert "ran" not in [e.get("result") for e in render(history)]
