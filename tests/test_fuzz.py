"""Fuzzed input: arbitrary tool arguments from the model and arbitrary approval payloads never
fail a workflow task; every run ends completed or failed with a clear error."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import fetch_history, result_of, task_failures, wait_for
from toren import client as toren_client
from toren.worker import serve
from toren.worker.models import ScriptedModel

TOOL = """
from toren import define_tool
tool = define_tool(
    description="Typed tool.",
    input={"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"},
           "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["n"],
           "additionalProperties": False},
    handler=lambda a, c: "ok " + str(a["n"]),
)
"""

GATED = """
from toren import define_tool
tool = define_tool(description="Needs a person.", approval="always", handler=lambda a, c: "ran")
"""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def deep(depth: int) -> Any:
    node: Any = 1
    for _ in range(depth):
        node = {"n": node}
    return node


raw_arguments = st.one_of(
    json_values.map(json.dumps),  # any JSON, mostly of the wrong shape
    st.text(max_size=200),  # invalid JSON text
    st.fixed_dictionaries({"n": st.integers()}).map(json.dumps),  # valid
    st.integers(min_value=50, max_value=400).map(lambda d: json.dumps(deep(d))),  # deep nesting
    st.integers(min_value=10_000, max_value=300_000).map(
        lambda k: json.dumps({"n": 1, "s": "x" * k})
    ),
    st.just(""),
)
tool_names = st.sampled_from(["typed", "typed", "unknown_tool", "", "typed; DROP"])
calls = st.lists(st.tuples(tool_names, raw_arguments), min_size=1, max_size=4)

FIGURES = {"runs": 0, "tool_calls": 0, "signals": 0, "task_failures": 0, "bad_ends": 0}


def report() -> None:
    print(
        f"\nfuzz: {FIGURES['runs']} runs, {FIGURES['tool_calls']} tool-call payloads, "
        f"{FIGURES['signals']} signal payloads, {FIGURES['task_failures']} workflow task failures, "
        f"{FIGURES['bad_ends']} runs ended otherwise than completed/failed-with-a-clear-error"
    )


async def test_arbitrary_tool_arguments(client: Client, make_agent: Callable[..., Path]) -> None:
    folder = make_agent(tools={"typed": TOOL})
    batches: list[list[tuple[str, str]]] = []

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(calls)
    def collect(batch: list[tuple[str, str]]) -> None:
        batches.append(batch)

    collect()
    script: list[Any] = [
        {
            "tool_calls": [
                {"id": f"c{i}_{j}", "name": n, "arguments": a} for j, (n, a) in enumerate(b)
            ]
        }
        for i, b in enumerate(batches)
    ]
    model = ScriptedModel([*script, "survived"])
    async with serve(client, [folder], models={"mock/scripted": model}):
        handle = await toren_client.start_run(
            client, folder.name, "fuzz", run_id=f"{folder.name}-fuzz"
        )
        try:
            result = await result_of(handle)
            ok = result.text == "survived"
        except WorkflowFailureError as err:
            ok = "BudgetExceeded" in str(getattr(err.cause, "type", ""))
    history = await fetch_history(client, handle.id)
    FIGURES["runs"] += 1
    FIGURES["tool_calls"] += sum(len(b) for b in batches)
    FIGURES["task_failures"] += len(task_failures(history))
    FIGURES["bad_ends"] += 0 if ok else 1
    report()
    assert FIGURES["task_failures"] == 0
    assert ok


async def test_arbitrary_approval_payloads(client: Client, make_agent: Callable[..., Path]) -> None:
    folder = make_agent(
        tools={"gated": GATED},
        script=[
            {"tool_calls": [{"id": "g", "name": "gated", "args": {}}]},
            "end {last_tool_result}",
        ],
    )
    payloads: list[list[Any]] = []

    payload = json_values | st.fixed_dictionaries({"call_id": json_values})
    # Anything but the one valid decision, which a fuzzer could stumble on.
    not_valid = payload.filter(lambda p: not (isinstance(p, dict) and p.get("call_id") == "g"))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(not_valid, max_size=2))
    def collect(args: list[Any]) -> None:
        payloads.append(args)

    collect()
    async with serve(client, [folder]):
        handle = await toren_client.start_run(client, folder.name, "fuzz signals")
        await wait_for(lambda: toren_client.pending(client, handle.id))
        for i, args in enumerate(payloads):
            await handle.signal("deny" if i % 2 else "approve", args=args)
        still = await toren_client.pending(client, handle.id)
        assert [c.call_id for c in still] == ["g"]  # nothing random decided it
        await handle.signal("approve", {"call_id": "g", "by": "fuzz"})
        result = await result_of(handle)
        refused = await handle.query("refused_signals")
    history = await fetch_history(client, handle.id)
    FIGURES["runs"] += 1
    FIGURES["signals"] += len(payloads)
    FIGURES["task_failures"] += len(task_failures(history))
    FIGURES["bad_ends"] += 0 if result.text == "end ran" else 1
    report()
    assert len(refused) == len(payloads)
    assert FIGURES["task_failures"] == 0 and FIGURES["bad_ends"] == 0
