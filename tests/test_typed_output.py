"""Typed final outputs: agent.yaml `output:`, the provider's request, validation in the workflow.

The three scenarios run on the dev server with the scripted model: a valid answer (read by
toren's client as the caller's pydantic model, by the plain Temporal client and by the
`temporal` CLI as JSON), an invalid one the model fixes when told, and invalid ones until the
run fails with `InvalidOutput`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from tests._sdk_http import sdk_client
from tests.conftest import fetch_history, result_of
from tests.test_streaming import collect
from toren import client as toren_client
from toren.agent._schema import validate_args
from toren.client._events import render
from toren.errors import ConfigError, RunError
from toren.testing import temporal_cli
from toren.worker import serve
from toren.worker._agent import load_agent
from toren.worker.models._anthropic import AnthropicModel
from toren.worker.models._base import ModelRequest
from toren.worker.models._openai import OpenAIModel
from toren.worker.models._output import ask_for_output
from toren.workflows._output import parse_output

ORDER = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["refund", "deny"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
            },
        },
    },
    "required": ["verdict", "items"],
}
GOOD = {"verdict": "refund", "items": [{"sku": "A-1", "qty": 2}]}
BAD = {"verdict": "maybe", "items": [{"sku": "A-1", "qty": "two"}]}


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    verdict: str
    items: list[Item]


MODEL_FILE = """
from pydantic import BaseModel

class Item(BaseModel):
    sku: str
    qty: int

class Order(BaseModel):
    verdict: str
    items: list[Item]
"""


# -- agent.yaml -------------------------------------------------------------------------------


def test_output_and_output_model_together_name_both_keys(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(output=ORDER, output_model="answer:Order")
    (folder / "answer.py").write_text(MODEL_FILE)
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    assert "output_model: give either output: or output_model:, not both" in str(err.value)


def test_a_broken_schema_a_missing_model_and_a_wrong_mode_are_named(
    make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    folder = make_agent(output={"type": "objekt"}, model="anthropic/claude-x", output_mode="native")
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    text = str(err.value)
    assert "output: not a valid JSON Schema" in text
    assert "output_mode: 'native' is OpenAI's response_format" in text
    folder = make_agent(output_model="nowhere:Order")
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    assert "output_model: 'nowhere:Order': no file nowhere.py in the agent folder" in str(err.value)
    (folder / "answer.py").write_text("Order = 5\n")
    (folder / "agent.yaml").write_text(
        (folder / "agent.yaml").read_text().replace("nowhere", "answer")
    )
    with pytest.raises(ConfigError) as err:
        load_agent(folder)
    assert "'Order' in answer.py is not a pydantic model class" in str(err.value)


def test_output_model_becomes_the_recorded_schema(make_agent: Callable[..., Path]) -> None:
    folder = make_agent(output_model="answer:Order", limits={"maxOutputRetries": 0})
    (folder / "answer.py").write_text(MODEL_FILE)
    agent = load_agent(folder)
    assert agent.output_name == "Order"
    assert agent.output_schema == Order.model_json_schema()
    assert agent.config.limits.max_output_retries == 0


def test_errors_name_nested_places_and_fences_are_tolerated() -> None:
    problem = validate_args(ORDER, BAD, indexed=True)
    assert problem is not None
    assert "items[0].qty: 'two' is not of type 'integer'" in problem
    assert "verdict: 'maybe' is not one of ['refund', 'deny']" in problem
    assert parse_output('```json\n{"a": 1}\n```') == ({"a": 1}, None)
    assert parse_output("[1, 2]") == ([1, 2], None)
    value, problem = parse_output("Sure! here it is")
    assert value is None and problem is not None and problem.startswith("not valid JSON")


# -- what each provider is sent ---------------------------------------------------------------


def _capture(reply: dict[str, Any]) -> tuple[list[dict[str, Any]], httpx.MockTransport]:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=reply)

    return sent, httpx.MockTransport(handler)


REQUEST = ModelRequest(
    model="m", system="Be brief.", messages=[{"role": "user", "content": "Order A-1?"}]
)


async def test_openai_gets_the_schema_as_response_format() -> None:
    reply = {
        "model": "gpt-x",
        "choices": [{"message": {"content": json.dumps(GOOD)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5},
    }
    sent, transport = _capture(reply)
    request, answered = ask_for_output(REQUEST, ORDER, "Order", "auto", "openai")
    got = answered(await OpenAIModel("k", transport=transport).complete(request))
    assert sent[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Order", "schema": ORDER, "strict": False},
    }
    assert sent[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert json.loads(got.content) == GOOD


async def test_anthropic_answers_through_a_final_output_tool_that_becomes_text() -> None:
    reply = {
        "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "final_output", "input": GOOD}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 5, "output_tokens": 5},
    }
    sent, transport = _capture(reply)
    request, answered = ask_for_output(REQUEST, ORDER, "Order", "auto", "anthropic")
    got = answered(await AnthropicModel("k", http_client=sdk_client(transport)).complete(request))
    tools = sent[0]["tools"]
    assert [t["name"] for t in tools] == ["final_output"]
    assert tools[0]["input_schema"] == ORDER
    system = sent[0]["system"][0]["text"]  # a block: it carries a cache breakpoint
    assert system.startswith("Be brief.") and "calling the tool `final_output`" in system
    assert "response_format" not in sent[0]
    assert got.tool_calls == [] and json.loads(got.content) == GOOD
    assert got.message() == {"role": "assistant", "content": got.content}
    assert got.finish_reason == "stop"


async def test_a_tool_call_beside_final_output_stays_a_tool_call() -> None:
    reply = {
        "content": [
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}},
            {"type": "tool_use", "id": "t2", "name": "final_output", "input": GOOD},
        ],
        "stop_reason": "tool_use",
        "usage": {},
    }
    _, transport = _capture(reply)
    request, answered = ask_for_output(REQUEST, ORDER, "Order", "tool", "anthropic")
    got = answered(await AnthropicModel("k", http_client=sdk_client(transport)).complete(request))
    assert [c["name"] for c in got.tool_calls] == ["lookup", "final_output"]


async def test_prompted_mode_puts_the_schema_in_the_instructions() -> None:
    reply = {"choices": [{"message": {"content": "[3]"}, "finish_reason": "stop"}], "usage": {}}
    sent, transport = _capture(reply)
    schema = {"type": "array", "items": {"type": "integer"}}
    request, answered = ask_for_output(REQUEST, schema, "output", "prompted", "openai")
    got = answered(await OpenAIModel("k", transport=transport).complete(request))
    assert "response_format" not in sent[0] and "tools" not in sent[0]
    system = sent[0]["messages"][0]["content"]
    assert system.startswith("Be brief.") and json.dumps(schema) in system
    assert got.content == "[3]"


async def test_a_non_object_schema_is_wrapped_for_the_tool_and_unwrapped() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    reply = {
        "content": [
            {"type": "tool_use", "id": "t", "name": "final_output", "input": {"value": [1]}}
        ],
        "stop_reason": "tool_use",
        "usage": {},
    }
    sent, transport = _capture(reply)
    request, answered = ask_for_output(REQUEST, schema, "output", "auto", "anthropic")
    got = answered(await AnthropicModel("k", http_client=sdk_client(transport)).complete(request))
    assert sent[0]["tools"][0]["input_schema"]["properties"]["value"] == schema
    assert json.loads(got.content) == [1]


# -- runs on the dev server -------------------------------------------------------------------


async def test_a_valid_answer_is_the_typed_output_for_every_client(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    folder = make_agent(output=ORDER, script=[json.dumps(GOOD)] * 3)
    name = folder.name
    async with serve(client, [folder]):
        result = await result_of(
            toren_client.run_agent(client, name, "Order A-1?", output_type=Order)
        )
        assert isinstance(result.output, Order)
        assert result.output.items[0].qty == 2
        assert json.loads(result.text) == GOOD and result.steps == 1
        # Any SDK: the result is plain JSON with `output` parsed.
        plain = await Client.connect(dev_server.address)
        raw = await result_of(
            plain.execute_workflow(
                "AgentRun", {"agent": name, "prompt": "hi"}, id=f"{name}-plain", task_queue=name
            )
        )
        assert raw["output"] == GOOD
        # The live stream's last item says it too (read after the end: a worker answers).
        items, _ = await collect(client, f"{name}-plain")
        assert items[-1].type == "run_completed" and items[-1].data["output"] == GOOD
        out = await asyncio.to_thread(
            subprocess.run,
            [temporal_cli(), "workflow", "execute", "--address", dev_server.address,
             "--type", "AgentRun", "--task-queue", name, "--workflow-id", f"{name}-cli",
             "--input", json.dumps({"agent": name, "prompt": "hi"}), "-o", "json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)["closeEvent"]["workflowExecutionCompletedEventAttributes"]
    assert shown["result"][0]["output"] == GOOD
    events = render(await fetch_history(client, f"{name}-plain"))
    completed = [e for e in events if e["type"] == "RunCompleted"]
    assert completed[0]["output"] == GOOD
    assert not [e for e in events if e["type"] == "OutputRejected"]


async def test_an_invalid_answer_goes_back_with_its_errors_and_is_fixed(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def fixed(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "```json\n" + json.dumps(GOOD) + "\n```"

    folder = make_agent(output=ORDER)
    from toren.worker.models import ScriptedModel

    model = ScriptedModel([json.dumps(BAD), fixed])
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(client, folder.name, "Order A-1?")
        result = await result_of(handle)
    assert result.output == GOOD and result.steps == 2
    told = seen[0][-1]
    assert told["role"] == "user"
    assert told["content"].startswith("(toren: your final answer did not match the output schema")
    assert "items[0].qty: 'two' is not of type 'integer'" in told["content"]
    events = render(await fetch_history(client, handle.id))
    rejected = [e for e in events if e["type"] == "OutputRejected"]
    assert len(rejected) == 1 and rejected[0]["attempt"] == 1
    assert "items[0].qty" in rejected[0]["errors"]


async def test_invalid_answers_past_the_retries_fail_the_run(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(output=ORDER, limits={"maxOutputRetries": 1})
    (folder / "mock_script.yaml").write_text(json.dumps(["no JSON", json.dumps(BAD), "{}"]))
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "Order A-1?")
        with pytest.raises(WorkflowFailureError) as err:
            await result_of(handle)
    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidOutput"
    assert "did not match the output schema after 2 answers" in cause.message
    assert "items[0].qty: 'two' is not of type 'integer'" in cause.message
    events = render(await fetch_history(client, handle.id))
    assert [e["attempt"] for e in events if e["type"] == "OutputRejected"] == [1]
    assert "not valid JSON" in next(e for e in events if e["type"] == "OutputRejected")["errors"]
    failed = [e for e in events if e["type"] == "RunFailed"]
    assert failed and "InvalidOutput" in json.dumps(failed[0])


async def test_output_model_in_tool_mode_and_a_thread_reply(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    # The scripted model answers the way Anthropic would in tool mode: a final_output call.
    final = {"tool_calls": [{"name": "final_output", "args": GOOD}]}
    folder = make_agent(output_model="answer:Order", output_mode="tool", script=[final] * 4)
    (folder / "answer.py").write_text(MODEL_FILE)
    async with serve(client, [folder]):
        thread = await toren_client.start_thread(client, folder.name)
        answer = await toren_client.send_message(client, thread.id, "Order?", output_type=Order)
        assert answer["status"] == "completed"
        assert isinstance(answer["output"], Order) and answer["output"].verdict == "refund"
        plain = await toren_client.send_message(client, thread.id, "Again?")
        assert plain["output"] == GOOD
        await toren_client.close_thread(client, thread.id)


async def test_a_run_without_output_has_none(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    folder = make_agent(script=["not JSON at all"])
    async with serve(client, [folder]):
        result = await result_of(
            toren_client.run_agent(client, folder.name, "hi", output_type=Order)
        )
    assert result.output is None and result.text == "not JSON at all"


async def test_the_client_names_a_class_that_does_not_fit(
    client: Client, make_agent: Callable[..., Path]
) -> None:
    class Other(BaseModel):
        name: str

    folder = make_agent(output=ORDER, script=[json.dumps(GOOD)])
    async with serve(client, [folder]):
        with pytest.raises(Exception) as err:
            await result_of(toren_client.run_agent(client, folder.name, "hi", output_type=Other))
    assert "does not fit Other" in str(err.value)
    assert not isinstance(err.value, RunError)


async def test_toren_check_shows_the_schema_and_toren_run_prints_the_output(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    from tests.test_cli import _cli

    folder = make_agent(output=ORDER, script=[json.dumps(GOOD)])
    checked = await _cli(dev_server.address, "check", str(folder))
    assert checked.returncode == 0, checked.stderr
    assert "output output: output_mode=auto maxOutputRetries=2" in checked.stdout
    assert '"enum": [' in checked.stdout  # the schema, indented
    async with serve(client, [folder]):
        out = await _cli(dev_server.address, "run", str(folder), "Order A-1?")
    assert out.returncode == 0, out.stdout + out.stderr
    printed = out.stdout[out.stdout.index("RunCompleted") :].split("\n", 1)[1]
    assert printed.startswith('{\n  "verdict": "refund",\n  "items": [')


def test_an_agent_without_output_keeps_its_digest() -> None:
    from dataclasses import replace

    from toren.agent._spec import AgentSpec
    from toren.worker._digest import spec_digest

    spec = AgentSpec(name="a", model="mock/echo", tools=[])
    # What toren before typed outputs computed for this spec: upgrading renames no agent.
    assert spec_digest(spec, "files") == "sha256:8140ef956dbfab48"
    typed = replace(spec, output_schema=ORDER, output_name="output")
    assert spec_digest(typed, "files") != spec_digest(spec, "files")
