"""A run never hangs on bad input: the workflow checks its own input in its first task.

Runs are started the way any SDK starts them (a plain client, the default converter, the
workflow type by name), with inputs people get wrong. Each fails at once, non-retryably, with
a message that names the key and the fix; none leaves a workflow task failing and retrying.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from tests.conftest import fetch_history, result_of, task_failures
from toren.client._events import render
from toren.testing import temporal_cli
from toren.worker import serve
from toren.workflows import _tool_calls


async def start_raw(client: Client, queue: str, raw: Any) -> Any:
    return await client.start_workflow(
        "AgentRun", raw, id=f"raw-{uuid.uuid4().hex[:10]}", task_queue=queue
    )


async def failure_of(handle: Any) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as err:
        await asyncio.wait_for(handle.result(), timeout=30)
    cause = err.value.cause
    assert isinstance(cause, ApplicationError), cause
    return cause


def bad_inputs(agent: str) -> dict[str, tuple[Any, str]]:
    return {
        "a JSON string": (json.dumps({"agent": agent, "prompt": "hi"}), "expected a JSON object, got a string"),
        "empty object": ({}, "missing key 'agent'; missing key 'prompt'"),
        "no agent": ({"prompt": "hi"}, "missing key 'agent'"),
        "promt": ({"agent": agent, "promt": "hi"}, "unknown key 'promt'; did you mean 'prompt'?"),
        "prompt 5": ({"agent": agent, "prompt": 5}, "'prompt' must be a string, got a number"),
        "arguments x": ({"agent": agent, "prompt": "p", "arguments": "x"}, "'arguments' must be a JSON object, got a string"),
        "messages x": ({"agent": agent, "prompt": "p", "messages": "x"}, "'messages' must be a list of messages, got a string"),
        "attachments abc": ({"agent": agent, "prompt": "p", "attachments": "abc"}, "'attachments' must be a list of attachment ids"),
        "capitalised": ({"Agent": agent, "Prompt": "p"}, "unknown key 'Agent'; did you mean 'agent'?; unknown key 'Prompt'; did you mean 'prompt'?"),
        "argumnets": ({"agent": agent, "prompt": "p", "argumnets": {}}, "unknown key 'argumnets'; did you mean 'arguments'?"),
        "forged carry": ({"agent": agent, "prompt": "p", "carry": {"step": 1}}, "'carry' is set by toren when a run continues as new"),
        "fork x": ({"agent": agent, "prompt": "", "fork": "x"}, "'fork' must be a JSON object, got a string"),
        "fork step 0": ({"agent": agent, "prompt": "", "fork": {"run_id": "r", "step": 0}}, "'fork.step' must be a whole number from 1, got 0"),
        "fork colour": ({"agent": agent, "prompt": "", "fork": {"run_id": "r", "step": 1, "colour": 1}}, "'fork': unknown key 'colour'"),
        "eval x": ({"agent": agent, "prompt": "p", "eval": "x"}, "'eval' must be a JSON object, got a string"),
        "eval calls": ({"agent": agent, "prompt": "p", "eval": {"run_id": "r", "calls": {}}}, "'eval.calls' must be a list of recorded calls, got an object"),
        "eval call args": ({"agent": agent, "prompt": "p", "eval": {"run_id": "r", "calls": [{"tool": "t", "args": [], "result": ""}]}}, "'eval.calls[0].args' must be a JSON object, got an array"),
        "eval on_diverge": ({"agent": agent, "prompt": "p", "eval": {"run_id": "r", "calls": [], "on_diverge": "halt"}}, "'eval.on_diverge' must be one of continue, stop, got 'halt'"),
        "eval and fork": ({"agent": agent, "prompt": "p", "eval": {"run_id": "r", "calls": []}, "fork": {"run_id": "r", "step": 1}}, "'eval' and 'fork' together"),
        "fork workspace": ({"agent": agent, "prompt": "", "fork": {"run_id": "r", "step": 1, "workspace": "v1"}}, "'fork.workspace' must be a workspace version id"),
    }  # fmt: skip


async def test_wrong_inputs_fail_at_once_naming_the_key(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    folder = make_agent(script=["fine"])
    plain = await Client.connect(dev_server.address)  # the default converter, as any SDK
    async with serve(client, [folder]):
        handles = {
            label: (await start_raw(plain, folder.name, raw), expected)
            for label, (raw, expected) in bad_inputs(folder.name).items()
        }
        for label, (handle, expected) in handles.items():
            cause = await failure_of(handle)
            assert cause.type == "InvalidRunInput" and cause.non_retryable, label
            assert expected in cause.message, (label, cause.message)
            assert '{"agent": "support", "prompt":' in cause.message, label
            history = await fetch_history(client, handle.id)
            assert not task_failures(history), label
            kinds = [e["type"] for e in render(history)]
            assert kinds[0] == "RunStarted" and kinds[-1] == "RunFailed", label
        ok = await start_raw(plain, folder.name, {"agent": folder.name, "prompt": "hi"})
        assert (await result_of(ok))["text"] == "fine"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


async def test_random_json_inputs_all_close(
    client: Client, make_agent: Callable[..., Path], dev_server: Any
) -> None:
    folder = make_agent(script=["fine"] * 10)  # earlier assistant messages skip steps
    plain = await Client.connect(dev_server.address)
    agent = folder.name
    examples: list[Any] = []

    valid = st.fixed_dictionaries(
        {"agent": st.just(agent), "prompt": st.text(max_size=8)},
        optional={
            "arguments": st.dictionaries(st.text(max_size=4), json_values, max_size=2),
            "messages": st.lists(
                st.fixed_dictionaries(
                    {"role": st.just("user"), "content": st.text(max_size=8)}
                ),  # the script counts replies
                max_size=2,
            ),
        },
    )

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.one_of(
            json_values,
            valid,
            st.fixed_dictionaries(
                {"agent": st.sampled_from([agent, "", "Nope", 5])},
                optional={"prompt": json_values | st.text(max_size=8), "arguments": json_values,
                          "messages": json_values, "attachments": json_values, "carry": json_values,
                          "extra": json_values},
            ),
        )
    )  # fmt: skip
    def collect(value: Any) -> None:
        examples.append(value)

    collect()
    # And a valid input with each key set to each kind of value: most are wrong in that key
    # alone, so a check that lets one kind of mistake through is caught (random inputs are
    # seldom wrong in one place only).
    keys = ["agent", "prompt", "arguments", "messages", "attachments", "carry", "extra", "Prompt"]
    values = [None, 5, "x", [1], {}, [{"role": "user", "content": "c"}], ["id"]]
    examples += [{"agent": agent, "prompt": "p", key: v} for key in keys for v in values]
    # Valid inputs too, so a parser that refuses everything fails this test as well.
    examples += [{"agent": agent, "prompt": "hi"},
                 {"agent": agent, "prompt": "", "arguments": {}, "messages": [], "carry": None}]  # fmt: skip
    async with serve(client, [folder]):
        handles = [await start_raw(plain, agent, raw) for raw in examples]
        for raw, handle in zip(examples, handles, strict=True):
            expected = expected_outcome(raw, agent)
            try:
                result = await asyncio.wait_for(handle.result(), timeout=30)
            except WorkflowFailureError as err:
                assert expected != "fine", (raw, err.cause)
                assert isinstance(err.cause, ApplicationError), (raw, err.cause)
                assert err.cause.non_retryable, raw
                if expected in ("invalid", "unknown"):
                    kind = "InvalidRunInput" if expected == "invalid" else "UnknownAgent"
                    assert err.cause.type == kind, (raw, err.cause)
            else:
                assert expected in ("fine", "either"), (raw, result)  # a wrong input never runs
                assert result["text"] == "fine", raw
            history = await fetch_history(client, handle.id)
            assert not task_failures(history), raw


ROLES = {"user", "assistant", "tool", "system"}


def _is_message(m: Any) -> bool:
    return (
        isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str | None)
    )


def expected_outcome(raw: Any, agent: str) -> str:
    """What a run started with `raw` must do, decided here and not by toren's parser.

    `invalid`: fail at once with InvalidRunInput. `unknown`: fail with UnknownAgent (a well-formed
    name this worker does not serve). `fine`: run and answer "fine". `either`: a
    valid input whose attachment ids do not exist (the run may fail on them, but not as input).
    """
    if not isinstance(raw, dict):
        return "invalid"
    messages, attachments = raw.get("messages"), raw.get("attachments")
    valid = (
        set(raw) <= {"agent", "prompt", "arguments", "messages", "attachments", "carry"}
        and isinstance(raw.get("agent"), str)
        and re.fullmatch("[a-z][a-z0-9_]*", raw["agent"]) is not None  # an agent's name
        and isinstance(raw.get("prompt"), str)
        and (raw.get("arguments") is None or isinstance(raw["arguments"], dict))
        and raw.get("carry") is None  # only toren sets it, when a run continues as new
        and (messages is None or (isinstance(messages, list) and all(map(_is_message, messages))))
        and (attachments is None or (isinstance(attachments, list) and all(isinstance(a, str) for a in attachments)))
    )  # fmt: skip
    if not valid:
        return "invalid"
    if raw["agent"] != agent:
        return "unknown"
    return "either" if attachments else "fine"


async def test_a_bug_in_workflow_code_fails_the_run_instead_of_retrying(
    client: Client, make_agent: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(tool: str, args: dict[str, Any]) -> str:
        raise KeyError("input_tokens")

    # toren's modules are passed through Temporal's sandbox, so the patch reaches the workflow.
    monkeypatch.setattr(_tool_calls, "_summary", broken)
    folder = make_agent(
        tools={"noop": "from toren import define_tool\ntool = define_tool(description='x', handler=lambda a, c: 'ok')\n"},
        script=[{"tool_calls": [{"name": "noop", "args": {}}]}, "done"],
    )  # fmt: skip
    async with serve(client, [folder]):
        handle = await start_raw(client, folder.name, {"agent": folder.name, "prompt": "go"})
        cause = await failure_of(handle)
    assert cause.type == "TorenBug" and cause.non_retryable
    assert "KeyError: 'input_tokens'" in cause.message
    assert not task_failures(await fetch_history(client, handle.id))


def deep(levels: int) -> bytes:
    """A JSON object whose `arguments` nest `levels` lists deep (valid JSON, too deep to read)."""
    return (
        b'{"agent": "x", "prompt": "p", "arguments": {"a": ' + b"[" * levels + b"]" * levels + b"}}"
    )


@pytest.mark.parametrize("workflow_type", ["AgentRun", "AgentThread"])
async def test_starts_no_decoder_reads_fail_at_once_showing_the_expected_json(
    client: Client, make_agent: Callable[..., Path], dev_server: Any, workflow_type: str
) -> None:
    folder = make_agent(script=["fine"])
    queue = folder.name
    cli = [temporal_cli(), "workflow", "start", "--address", dev_server.address]
    cli += ["--type", workflow_type, "--task-queue", queue]
    example = '{"agent": "support", "' + ("user_id" if workflow_type == "AgentThread" else "prompt")
    ids: dict[str, str] = {}
    # As a person with the `temporal` CLI starts them: no input, `null`, two inputs.
    for label, extra in (
        ("no input", []),
        ("null", ["--input", "null"]),
        ("two inputs", ["--input", '{"agent": "a"}', "--input", '{"agent": "b"}']),
    ):
        ids[label] = f"cli-{uuid.uuid4().hex[:10]}"
        out = subprocess.run(
            [*cli, "--workflow-id", ids[label], *extra], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
    # As any SDK can send them: JSON nested past what a decoder reads, and bytes that are no JSON.
    for label, data in (
        ("nested 200", deep(200)),
        ("nested 100 000", deep(100_000)),
        ("not JSON", b"\xff{"),
    ):
        ids[label] = f"raw-{uuid.uuid4().hex[:10]}"
        payload = Payload(metadata={"encoding": b"json/plain"}, data=data)
        await client.start_workflow(
            workflow_type, RawValue(payload), id=ids[label], task_queue=queue
        )
    # Two inputs, one nested past the decoder: with two arguments the SDK decodes them itself,
    # before any of toren's workflow code runs.
    two_deep = f"raw-{uuid.uuid4().hex[:10]}"
    await client.start_workflow(
        workflow_type,
        args=[
            RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b'{"agent": "a"}')),
            RawValue(Payload(metadata={"encoding": b"json/plain"}, data=deep(200))),
        ],
        id=two_deep,
        task_queue=queue,
    )
    async with serve(client, [folder]):
        cause = await failure_of(client.get_workflow_handle(two_deep))
        assert cause.type == "InvalidJSONPayloadError", cause
        assert "recursion limit exceeded" in cause.message, cause.message
        assert not task_failures(await fetch_history(client, two_deep))
        for label, workflow_id in ids.items():
            cause = await failure_of(client.get_workflow_handle(workflow_id))
            assert cause.type == "InvalidRunInput" and cause.non_retryable, (label, cause)
            assert f"invalid {workflow_type} input" in cause.message, (label, cause.message)
            assert example in cause.message, (label, cause.message)
            assert not task_failures(await fetch_history(client, workflow_id)), label
