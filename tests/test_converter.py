"""toren's payload converter and sandbox runner: what they share across runs, and what not."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from toren.agent import _converter
from toren.agent._spec import AgentSpec
from toren.agent._types import ModelCallResult, RunInput, RunState, ToolCallInput, ToolCallResult
from toren.connect._plugin import PASSTHROUGH, workflow_runner
from toren.store._payloads import data_converter


def test_the_default_converter_is_the_pydantic_one_with_shared_adapters() -> None:
    converter = data_converter("")
    assert converter.payload_converter_class is _converter.TorenPayloadConverter
    assert issubclass(converter.payload_converter_class, PydanticPayloadConverter)
    # Same encodings, in the same order, as the SDK's pydantic converter.
    ours = list(_converter.TorenPayloadConverter().converters)
    assert ours == list(PydanticPayloadConverter().converters)


def test_toren_types_round_trip_and_share_one_adapter_across_converters() -> None:
    state = RunState(step=3, messages=[{"role": "user", "content": "hi"}])
    first, second = _converter.TorenPayloadConverter(), _converter.TorenPayloadConverter()
    payloads = first.to_payloads([state, {"a": [1, 2]}, None])
    decoded = second.from_payloads(payloads, [RunState, dict[str, Any], ModelCallResult | None])
    assert decoded == [state, {"a": [1, 2]}, None]
    before = _converter._shared_adapter.cache_info().hits
    first.from_payloads(payloads[:1], [RunState])
    second.from_payloads(payloads[:1], [RunState])
    assert _converter._shared_adapter.cache_info().hits == before + 2
    assert _converter._shareable(AgentSpec) and _converter._shareable(list[dict[str, Any]])


def test_types_of_other_modules_stay_in_one_converters_own_cache() -> None:
    # A workflow's own types are re-imported per run by the sandbox: a shared cache would keep
    # every run's copy alive.
    @dataclasses.dataclass
    class Mine:
        x: int

    Mine.__module__ = "user_workflows"
    assert not _converter._shareable(Mine)
    assert not _converter._shareable(list[Mine])
    converter = _converter.TorenPayloadConverter()
    payloads = converter.to_payloads([Mine(1)])
    size = _converter._shared_adapter.cache_info().currsize
    assert converter.from_payloads(payloads, [Mine]) == [Mine(1)]
    assert _converter._shared_adapter.cache_info().currsize == size


def test_the_runner_passes_toren_through_and_keeps_a_users_own_runner_class() -> None:
    runner = workflow_runner()
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert set(PASSTHROUGH) <= runner.restrictions.passthrough_modules

    @dataclasses.dataclass(frozen=True)
    class Custom(SandboxedWorkflowRunner):
        pass

    custom = workflow_runner(Custom(restrictions=SandboxRestrictions.default))
    assert type(custom) is Custom and "toren" in custom.restrictions.passthrough_modules  # type: ignore[attr-defined]
    unsandboxed = UnsandboxedWorkflowRunner()
    assert workflow_runner(unsandboxed) is unsandboxed


def test_per_turn_types_are_written_without_their_defaults_and_read_either_way() -> None:
    converter = _converter.TorenPayloadConverter()
    call = ToolCallInput("c1", "t", {"q": None}, "wf:1:c1", 1, user_id="u")
    (payload,) = converter.to_payloads([call])
    assert json.loads(payload.data) == {
        "call_id": "c1", "tool": "t", "args": {"q": None},
        "idempotency_key": "wf:1:c1", "step": 1, "user_id": "u",
    }  # fmt: skip
    # What histories recorded before this (every field written) reads the same.
    older = Payload(metadata=payload.metadata, data=to_json(dataclasses.asdict(call)))
    assert b'"workspace":null' in older.data
    assert converter.from_payloads([payload, older], [ToolCallInput, ToolCallInput]) == [call, call]
    (done,) = converter.to_payloads([ToolCallResult("ok")])
    assert done.data == b'{"content":"ok"}'


def test_an_agent_spec_is_decoded_once_per_payload_and_cannot_be_changed() -> None:
    first, second = _converter.TorenPayloadConverter(), _converter.TorenPayloadConverter()
    (a,) = first.to_payloads([AgentSpec("a", "mock/x", [])])
    (b,) = first.to_payloads([AgentSpec("b", "mock/x", [])])
    spec_a, again, spec_b = (
        first.from_payloads([a], [AgentSpec])[0],
        second.from_payloads([a], [AgentSpec])[0],
        second.from_payloads([b], [AgentSpec])[0],
    )
    assert spec_a is again and spec_a.name == "a" and spec_b.name == "b"
    # Recorded once per run: what is at its default is left out (the tools' too).
    assert a.data == b'{"name":"a","model":"mock/x","tools":[]}'
    (start,) = first.to_payloads([RunInput("a", "hi")])
    assert start.data == b'{"agent":"a","prompt":"hi"}'
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec_a.name = "changed"  # type: ignore[misc]
