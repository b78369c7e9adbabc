"""A thread that changes provider between two messages: history stays toren's own types.

Version v1 of an agent runs on Anthropic, v2 (the same name, a new worker build) on OpenAI, v3 on
Anthropic again; both providers are faked at the HTTP boundary (`httpx.MockTransport`). The
thread's first message is answered on v1 with a thinking block and a tool call, the deployment
moves to v2, and the second message is answered on v2 by OpenAI, which must receive the first
turn's call and result in its own wire format (and none of Anthropic's verbatim blocks); the third,
back on Anthropic, gets OpenAI's turn as Anthropic blocks. Every model call recorded in history is
in toren's provider-neutral shape, and `toren events` renders both turns alike.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from temporalio.client import Client

from tests._neutral import model_results, neutral_problems
from tests._sdk_http import sdk_client
from tests.conftest import task_failures, wait_for
from tests.test_versioning import build_id_of, make_current
from toren import client as toren_client
from toren.testing import DevServer
from toren.worker import serve
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._openai import OpenAIModel

ANTHROPIC_KEY = "sk-ant-switch-0123456789"
OPENAI_KEY = "sk-switch-0123456789"
ENVIRON = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}

LOOKUP = """
from toren import define_tool

tool = define_tool(
    description="Look an order up.",
    input={"type": "object", "properties": {"order_id": {"type": "string"}},
           "required": ["order_id"]},
    handler=lambda a, c: "order " + a["order_id"] + " shipped",
)
"""

CHAIN = ("AgentLoaded", "RunContinuedAsNew", "ThreadStarted", "Receipt")
"""Events of a thread's chain of runs (v2's run starts in the second turn), not of a turn."""

THINKING = {"type": "thinking", "thinking": "The user wants A-1.", "signature": "EqQBSIGNED=="}


def anthropic_message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x",
        "content": content, "stop_reason": stop_reason,
        "usage": {"input_tokens": 30, "output_tokens": 12},
    }  # fmt: skip


def openai_completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1741570283,
        "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", **message},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
    }  # fmt: skip


ANTHROPIC_REPLIES = [
    anthropic_message(
        [
            THINKING,
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"order_id": "A-1"}},
        ],
        "tool_use",
    ),
    anthropic_message([{"type": "text", "text": "A-1 shipped."}], "end_turn"),
    anthropic_message([{"type": "text", "text": "You are welcome."}], "end_turn"),
]
OPENAI_REPLIES = [
    openai_completion(
        {
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_02",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"order_id": "B-2"}'},
                }
            ],
        },
        "tool_calls",
    ),
    openai_completion({"content": "B-2 shipped."}, "stop"),
]


def faked(replies: list[dict[str, Any]], bodies: list[dict[str, Any]]) -> httpx.MockTransport:
    """The provider's HTTP endpoint: records each request body, answers the next reply."""

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=replies[len(bodies) - 1])

    return httpx.MockTransport(handler)


def write_agent(root: Path, name: str, version: str, model: str) -> Path:
    folder = root / version / name
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.yaml").write_text(yaml.safe_dump({"name": name, "model": model}))
    (folder / "instructions.md").write_text("Answer about orders.")
    (folder / "tools" / "lookup.py").write_text(LOOKUP)
    return folder


async def test_a_thread_switches_provider_between_messages_and_history_stays_neutral(
    client: Client, dev_server: DevServer, tmp_path: Path, agent_name: str
) -> None:
    deployment = agent_name.replace("_", "-")
    v1 = write_agent(tmp_path, agent_name, "v1", "anthropic/claude-x")
    v2 = write_agent(tmp_path, agent_name, "v2", "openai/gpt-x")
    v3 = write_agent(tmp_path, agent_name, "v3", "anthropic/claude-x")
    sent_anthropic: list[dict[str, Any]] = []
    sent_openai: list[dict[str, Any]] = []
    anthropic = AnthropicModel(
        ANTHROPIC_KEY, http_client=sdk_client(faked(ANTHROPIC_REPLIES, sent_anthropic))
    )
    openai = OpenAIModel(OPENAI_KEY, transport=faked(OPENAI_REPLIES, sent_openai))

    def worker(folder: Path, version: str, models: dict[str, Any]) -> Any:
        return serve(
            client, [folder], environ=ENVIRON, models=models,
            deployment=deployment, build_id=version,
        )  # fmt: skip

    async def moved(thread_id: str, version: str) -> None:
        # The thread at rest moves now (`toren deploy move-threads`), not when the server
        # tells a message's first task of the new version, which can come a task late.
        async def done() -> bool:
            await toren_client.move_threads(client, agent_name, wait=timedelta(seconds=5))
            return await build_id_of(client, thread_id) == version

        await wait_for(done, timeout=60, every=0.5)

    async with worker(v1, "v1", {"anthropic/claude-x": anthropic}):
        await make_current(dev_server, deployment, "v1")
        thread = await toren_client.start_thread(client, v1.name, user_id="alice")
        first = await toren_client.send_message(client, thread.id, "Where is A-1?")
        assert first["text"] == "A-1 shipped."
        async with worker(v2, "v2", {"openai/gpt-x": openai}):
            await make_current(dev_server, deployment, "v2")
            await moved(thread.id, "v2")
            second = await toren_client.send_message(client, thread.id, "And B-2?")
            assert second["text"] == "B-2 shipped."
            assert await build_id_of(client, thread.id) == "v2"
            # And back: v3 runs on Anthropic again.
            async with worker(v3, "v3", {"anthropic/claude-x": anthropic}):
                await make_current(dev_server, deployment, "v3")
                await moved(thread.id, "v3")
                third = await toren_client.send_message(client, thread.id, "Thanks!")
                assert third["text"] == "You are welcome."
                await toren_client.close_thread(client, thread.id, by="test")
    assert len(sent_anthropic) == 3 and len(sent_openai) == 2

    # OpenAI got the Anthropic turn in its own format: the call, its result, the answer.
    wire = sent_openai[0]["messages"]
    assert wire[1:] == [
        {"role": "user", "content": "Where is A-1?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"order_id": "A-1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "order A-1 shipped"},
        {"role": "assistant", "content": "A-1 shipped."},
        {"role": "user", "content": "And B-2?"},
    ]
    for body in sent_openai:  # nothing only Anthropic reads leaks into an OpenAI request
        text = json.dumps(body)
        for leak in ("provider_content", "thinking", "EqQBSIGNED", "tool_use"):
            assert leak not in text, leak
    # ... while Anthropic itself got its thinking back verbatim inside its own tool loop,
    # and, back on Anthropic, OpenAI's turn as its own blocks.
    assert sent_anthropic[1]["messages"][1]["content"][0] == THINKING
    back = sent_anthropic[2]["messages"]
    assert back[5] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_02", "name": "lookup", "input": {"order_id": "B-2"}},
        ],
    }
    [result] = back[6]["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "call_02")
    assert result["content"] == "order B-2 shipped" and result["is_error"] is False
    assert '"function"' not in json.dumps(sent_anthropic[2])  # nothing of OpenAI's format

    # History: every model call's input and result in toren's neutral types.
    histories = await toren_client.histories(client, thread.id)
    for history in histories:
        assert task_failures(history) == []
    events = await toren_client.events(client, thread.id)
    completed = [e for e in events if e["type"] == "LlmCallCompleted"]
    assert [e["text"] for e in completed] == [
        "Let me look.", "A-1 shipped.", "Let me look.", "B-2 shipped.", "You are welcome.",
    ]  # fmt: skip
    for event in completed:
        for call in event["toolCalls"]:
            assert set(call) == {"id", "name", "arguments"}
            assert json.loads(call["arguments"])["order_id"] in ("A-1", "B-2")
    results = [r for h in histories for r in model_results(h)]
    assert len(results) == 5
    for result in results:
        assert neutral_problems(result) == []
        # A provider's verbatim blocks ride only under its own key.
        assert set(result["message"].get("provider_content") or {}) <= {"anthropic"}
    assert results[0]["message"]["provider_content"] == {
        "anthropic": ANTHROPIC_REPLIES[0]["content"]
    }
    assert [r["finish_reason"] for r in results] == [
        "tool_calls",
        "stop",
        "tool_calls",
        "stop",
        "stop",
    ]
    assert [r["usage"] for r in results] == [
        {"input_tokens": 30, "output_tokens": 12},
    ] * 2 + [{"input_tokens": 40, "output_tokens": 9}] * 2 + [
        {"input_tokens": 30, "output_tokens": 12}
    ]

    # `toren events` tells both turns the same way: the same events, with the same fields.
    def turn(n: int) -> list[tuple[str, list[str]]]:
        at = [i for i, e in enumerate(events) if e["type"] == "MessageReceived"][n]
        end = next(i for i, e in enumerate(events) if i > at and e["type"] == "MessageAnswered")
        shown = [e for e in events[at:end] if e["type"] not in CHAIN]
        return [(e["type"], sorted(k for k in e if k != "at")) for e in shown]

    assert turn(0) == turn(1)
    assert [kind for kind, _ in turn(0)] == [
        "MessageReceived", "LlmCallStarted", "LlmCallCompleted", "ToolCallStarted",
        "ToolCallCompleted", "LlmCallStarted", "LlmCallCompleted",
    ]  # fmt: skip


def test_a_providers_own_shape_outside_provider_content_is_reported() -> None:
    recorded = {
        "message": {
            "role": "assistant",
            "content": "",
            "thinking": "hmm",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "lookup"}}],
            "provider_content": {"anthropic": [], "openai": {}},
        },
        "usage": {"prompt_tokens": 3},
        "finish_reason": "stop",
    }
    problems = neutral_problems(recorded)
    assert "message key 'thinking'" in problems and "usage key 'prompt_tokens'" in problems
    assert any(p.startswith("tool call") for p in problems)
    assert any(p.startswith("provider_content must be one provider's") for p in problems)
    assert neutral_problems({"message": {"role": "assistant", "content": "ok"}}) == []
