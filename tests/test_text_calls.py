"""A tool call written as text: found by a pure detector, sent back once, never run.

The detector's forms and non-forms are unit tests; the runs are on the dev server: Qwen's bare
JSON call from a llama.cpp-shaped server (the issue's case), then with the scripted model: a
Hermes call as text, corrected into a real call that waits for approval;
a model that repeats it (the answer stands, `toren events` says so) in a thread whose next
message gets its own correction; a typed-output agent whose answer looks like a call.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.conftest import fetch_history, result_of, wait_for
from tests.test_llamacpp_recording import RecordedLlamaCpp, environ, line, weather_agent
from toren import client as toren_client
from toren.client._events import render
from toren.worker import serve
from toren.worker.models import ScriptedModel
from toren.workflows._text_calls import TOOL_CALL_AS_TEXT, TextCall, correction, find_text_call

TOOLS = {"refund_order", "lookup"}
ARGS = {"order_id": "A-1", "amount": 40}
CALL = {"name": "refund_order", "arguments": ARGS}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.dumps(CALL), TextCall("refund_order", "json")),
        (f"  {json.dumps(CALL)}\n", TextCall("refund_order", "json")),
        (json.dumps({"name": "lookup", "parameters": {}}), TextCall("lookup", "json")),
        (json.dumps([CALL, {"name": "lookup", "arguments": {"q": "x"}}]),
         TextCall("refund_order", "json", 2)),
        (f"```json\n{json.dumps(CALL)}\n```", TextCall("refund_order", "json")),
        (f"```\n{json.dumps([CALL])}\n```", TextCall("refund_order", "json")),
        (f"<tool_call>\n{json.dumps(CALL)}\n</tool_call>", TextCall("refund_order", "hermes")),
        (f"<tool_call>{json.dumps(CALL)}</tool_call>\n<tool_call>{json.dumps(CALL)}</tool_call>",
         TextCall("refund_order", "hermes", 2)),
        (json.dumps({"type": "function", "name": "refund_order", "parameters": ARGS}),
         TextCall("refund_order", "llama")),
        ("<|python_tag|>" + json.dumps({"name": "lookup", "parameters": {"q": "x"}}),
         TextCall("lookup", "llama")),
        (f"[TOOL_CALLS] {json.dumps([CALL])}", TextCall("refund_order", "mistral")),
        (f"[TOOL_CALLS]refund_order[ARGS]{json.dumps(ARGS)}", TextCall("refund_order", "mistral")),
        (f"[TOOL_CALLS]lookup[ARGS]{{}}[TOOL_CALLS]refund_order[ARGS]{json.dumps(ARGS)}",
         TextCall("lookup", "mistral", 2)),
        # The arguments as JSON text, as the API itself carries them.
        (json.dumps({"name": "refund_order", "arguments": json.dumps(ARGS)}),
         TextCall("refund_order", "json")),
        # OpenAI's own wire shape, copied into the text.
        (json.dumps({"type": "function", "function": {"name": "refund_order", "arguments": "{}"}}),
         TextCall("refund_order", "openai")),
        (json.dumps([{"id": "call_1", "type": "function",
                      "function": {"name": "lookup", "arguments": {"q": "x"}}}]),
         TextCall("lookup", "openai")),
    ],
)  # fmt: skip
def test_a_call_written_as_text_is_found_in_each_form(text: str, expected: TextCall) -> None:
    assert find_text_call(text, TOOLS) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Your refund is on its way.",
        # Words around the call: the model is talking about it, not making it.
        f"I will call this: {json.dumps(CALL)}",
        f"{json.dumps(CALL)}\nDone.",
        f"Sure! <tool_call>{json.dumps(CALL)}</tool_call>",
        f"<tool_call>{json.dumps(CALL)}</tool_call> and then I wait",
        f"<tool_call>{json.dumps(CALL)}",  # no closing tag
        # A name that is not a declared tool.
        json.dumps({"name": "delete_everything", "arguments": {}}),
        f"<tool_call>{json.dumps({'name': 'Alice', 'arguments': {}})}</tool_call>",
        json.dumps([CALL, {"name": "nope", "arguments": {}}]),
        "[TOOL_CALLS]nope[ARGS]{}",
        # Arguments that are not a JSON object (nor JSON text holding one).
        json.dumps({"name": "refund_order", "arguments": json.dumps(["A-1"])}),
        json.dumps({"name": "refund_order", "arguments": "{"}),
        json.dumps({"name": "refund_order", "arguments": ["A-1"]}),
        json.dumps({"name": "refund_order"}),
        json.dumps({"name": "refund_order", "arguments": ARGS, "parameters": ARGS}),
        "[TOOL_CALLS]refund_order[ARGS]not json",
        # Other JSON: more keys than a call has, another type, an empty list, not JSON at all.
        json.dumps({"name": "refund_order", "arguments": ARGS, "note": "later"}),
        json.dumps({"type": "tool", "name": "refund_order", "parameters": ARGS}),
        json.dumps({"type": "function", "function": {"name": "nope", "arguments": "{}"}}),
        json.dumps({"type": "function", "function": {"name": "lookup"}, "extra": 1}),
        "[]",
        '{"name": "refund_order", "arguments": {',
        "refund_order(order_id='A-1')",
    ],
)
def test_anything_else_is_an_ordinary_answer(text: str) -> None:
    assert find_text_call(text, TOOLS) is None


def test_the_correction_names_the_tool_and_says_nothing_ran() -> None:
    sent = correction(TextCall("refund_order", "hermes"))
    assert sent["role"] == "user"
    assert "`refund_order` written as text, so nothing ran" in sent["content"]
    assert "tool-calling interface" in sent["content"]
    assert sent[TOOL_CALL_AS_TEXT] == {"tool": "refund_order", "form": "hermes", "calls": 1}
    two = correction(TextCall("refund_order", "json", 2))["content"]
    assert "2 tool calls (the first to `refund_order`)" in two


REFUND = """
    from toren import define_tool
    tool = define_tool(
        description="Refund an order.",
        input={"type": "object", "properties": {"order_id": {"type": "string"}},
               "required": ["order_id"]},
        approval="always",
        handler=lambda a, c: "refunded " + a["order_id"],
    )
"""
AS_TEXT = '<tool_call>\n{"name": "refund_order", "arguments": {"order_id": "A-1"}}\n</tool_call>'


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_a_notice_between_the_correction_and_the_reply_does_not_send_it_back_twice() -> None:
    # A background run's notice (or an approval note) lands before the next model call: the
    # reply still answers the correction, and stands.
    from types import SimpleNamespace
    from unittest import mock

    from toren.agent._transcript import TranscriptRef
    from toren.agent._types import RunState
    from toren.workflows import _text_calls

    spec = SimpleNamespace(output_schema=None, tools=[SimpleNamespace(name="refund_order")])
    reply = {"role": "assistant", "content": json.dumps(CALL)}
    run, transcript = RunState(), TranscriptRef([{"role": "user", "content": "refund A-1"}])
    sent = []
    with mock.patch.object(_text_calls.workflow, "patched", return_value=True):
        for notice in (None, "(toren: background run r1 finished)", None, None):
            run.step += 1
            if notice:
                transcript.append({"role": "user", "content": notice}, {})
            transcript.append(reply, {"message": reply})
            sent.append(_text_calls.send_back(spec, run, transcript, reply))  # type: ignore[arg-type]
    # step 1 sent back; step 2 answers it (a notice between); step 3 is a new final answer.
    assert sent == [True, False, True, False]


async def test_a_call_written_as_text_goes_back_and_only_the_real_call_waits(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def real_call(messages: list[dict[str, Any]]) -> dict[str, Any]:
        seen.append(messages)
        return {"tool_calls": [{"id": "r1", "name": "refund_order", "args": {"order_id": "A-1"}}]}

    folder = make_agent(tools={"refund_order": REFUND})
    model = ScriptedModel([AS_TEXT, real_call, "done: {last_tool_result}"])
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "refund A-1")
        [call] = await wait_for(lambda: toren_client.pending(client, handle.id))
        assert call.call_id == "r1" and call.args == {"order_id": "A-1"}
        await toren_client.approve(client, handle.id, "r1", by="alice")
        result = await result_of(handle)
    assert result.text == "done: refunded A-1"
    assert result.steps == 3 and result.tool_calls == 1
    told = seen[0][-1]
    assert told["role"] == "user" and "`refund_order` written as text" in told["content"]
    events = render(await fetch_history(client, handle.id))
    [as_text] = of_type(events, "ToolCallAsText")
    assert as_text["tool"] == "refund_order" and as_text["form"] == "hermes"
    assert as_text["sentBack"] is True
    assert len(of_type(events, "ApprovalRequested")) == 1
    assert [e["callId"] for e in of_type(events, "ToolCallStarted")] == ["r1"]
    kinds = [e["type"] for e in events]
    # In order: the reply with the text, the correction, then the model's next call.
    at = kinds.index("ToolCallAsText")
    assert kinds[at - 1] == "LlmCallCompleted" and kinds[at + 1] == "LlmCallStarted"


async def test_a_repeat_ends_the_message_and_the_next_message_is_corrected_again(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(tools={"refund_order": REFUND})
    # Message 1: the call as text, twice. Message 2: as text once, then words.
    model = ScriptedModel([AS_TEXT, AS_TEXT, AS_TEXT, "I cannot refund A-1 myself."])
    async with serve(client, [folder], models={"mock/scripted": model}):
        thread = await toren_client.start_thread(client, folder.name)
        first = await toren_client.send_message(client, thread.id, "refund A-1")
        second = await toren_client.send_message(client, thread.id, "and now?")
        assert await toren_client.pending(client, thread.id) == []
        await toren_client.close_thread(client, thread.id, by="test")
    assert first["text"] == AS_TEXT and first["steps"] == 2 and first["tool_calls"] == 0
    assert second["text"] == "I cannot refund A-1 myself." and second["steps"] == 2
    events = render(await fetch_history(client, thread.id))
    shown = [(e["type"], e.get("sentBack")) for e in events]
    flow = [s for s in shown if s[0] in ("ToolCallAsText", "MessageAnswered")]
    assert flow == [
        ("ToolCallAsText", True),
        ("ToolCallAsText", False),
        ("MessageAnswered", None),
        ("ToolCallAsText", True),
        ("MessageAnswered", None),
    ]
    assert not of_type(events, "ApprovalRequested") and not of_type(events, "ToolCallStarted")


async def test_a_typed_answer_shaped_like_a_call_is_the_answer(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    shaped = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    }
    answer = {"name": "refund_order", "arguments": {"order_id": "A-1"}}
    folder = make_agent(tools={"refund_order": REFUND}, output=shaped, script=[json.dumps(answer)])
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "which call?")
        result = await asyncio.wait_for(result_of(handle), timeout=60)
    assert result.output == answer and result.steps == 1
    events = render(await fetch_history(client, handle.id))
    assert not of_type(events, "ToolCallAsText") and not of_type(events, "OutputRejected")


class QwenWritesItsCall(RecordedLlamaCpp):
    """The recorded llama.cpp server, whose first answer is the call written as its text.

    Then the recorded real call (line 15) and the recorded answer (line 16).
    """

    def __init__(self) -> None:
        super().__init__([])
        as_text = copy.deepcopy(line(16)["response"])
        call = {"name": "get_weather", "arguments": {"city": "Paris"}}
        as_text["choices"][0]["message"]["content"] = json.dumps(call)
        self.replies = [as_text, line(15)["response"], line(16)["response"]]

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        self.received.append(body)
        return 200, self.replies[len(self.received) - 1]


async def test_qwens_call_as_text_from_llamacpp_is_sent_back_and_then_made(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    server = QwenWritesItsCall()
    try:
        folder = weather_agent(make_agent)
        async with serve(client, [folder], environ=environ(server)):
            handle = await toren_client.start_run(client, folder.name, "Weather in Paris?")
            result = await result_of(handle)
    finally:
        server.close()
    assert result.text == line(16)["response"]["choices"][0]["message"]["content"]
    assert result.steps == 3 and result.tool_calls == 1
    # On the wire: the text came back as the model wrote it, then the correction, plain.
    sent = server.received[1]["messages"]
    assert sent[-2] == {"role": "assistant", "content": '{"name": "get_weather", '
                        '"arguments": {"city": "Paris"}}'}  # fmt: skip
    assert set(sent[-1]) == {"role", "content"} and sent[-1]["role"] == "user"
    assert "`get_weather` written as text, so nothing ran" in sent[-1]["content"]
    events = render(await fetch_history(client, handle.id))
    [as_text] = of_type(events, "ToolCallAsText")
    assert (as_text["tool"], as_text["form"], as_text["sentBack"]) == ("get_weather", "json", True)
    assert [e["tool"] for e in of_type(events, "ToolCallCompleted")] == ["get_weather"]


async def test_with_a_typed_output_the_call_as_text_is_sent_back_before_the_schema_check(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    verdict = {
        "type": "object",
        "properties": {"verdict": {"type": "string"}},
        "required": ["verdict"],
    }
    answer = {"verdict": "refund"}
    # The call as text, again (now the schema check refuses it), then a valid answer.
    script = [AS_TEXT, AS_TEXT, json.dumps(answer)]
    folder = make_agent(tools={"refund_order": REFUND}, output=verdict, script=script)
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "refund?")
        result = await asyncio.wait_for(result_of(handle), timeout=60)
    assert result.output == answer and result.steps == 3
    events = render(await fetch_history(client, handle.id))
    flow = [e["type"] for e in events if e["type"] in ("ToolCallAsText", "OutputRejected")]
    assert flow == ["ToolCallAsText", "OutputRejected"]
    assert of_type(events, "OutputRejected")[0]["attempt"] == 1  # the correction was free
