"""The bare-Temporal floor: the same command sequence as a toren run, with nothing of toren.

`PerfFloor(turns)` alternates a "model" activity (returns a small assistant message with one
tool call, like toren's) and a "tool" activity (returns 200 characters), `turns` times, then
one last "model" call that answers: exactly the activities a toren run of `turns` tool turns
schedules. Plain activities with toren's start-to-close timeouts (5 minutes a model call, 132 s
a tool call with no `timeout_ms`, so the server's timer for each fires at the same time after
either run), the default data converter and the default sandbox: what any Temporal workflow
pays for this sequence.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import SearchAttributeKey

__all__ = ["MODEL", "PARKED", "TOOL", "PerfFloor", "PerfFloorParked", "model", "tool"]

MODEL = "perf.model"
TOOL = "perf.tool"
MODEL_TIMEOUT = timedelta(minutes=5)
"""toren's `MODEL_TIMEOUT`."""
TOOL_TIMEOUT = timedelta(seconds=132)
"""toren's start-to-close for a tool with the default `timeout_ms` (120 s, plus a tenth)."""
PARKED = SearchAttributeKey.for_keyword("TorenStatus")
"""Set to `waiting_approval` while parked, as toren sets it, so a driver can count parked runs."""


@activity.defn(name=MODEL)
async def model(step: int, turns: int) -> dict[str, Any]:
    """A scripted model: a tool call for steps up to `turns`, then a final answer."""
    if step > turns:
        return {"role": "assistant", "content": "done"}
    call = {"id": f"call_{step}_1", "name": "noop", "arguments": json.dumps({"i": step})}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@activity.defn(name=TOOL)
async def tool(args: dict[str, Any]) -> str:
    """The no-op tool: 200 characters."""
    return "x" * 200


@workflow.defn(name="PerfFloor")
class PerfFloor:
    """`turns` model+tool pairs and a final model call."""

    @workflow.run
    async def run(self, turns: int, heartbeat_s: float = 0) -> str:
        """Run the sequence; return the final answer.

        `heartbeat_s` > 0 gives every activity that heartbeat timeout (toren sets 10 s on its
        model and tool calls, so a dead worker's call is retried in seconds): the server then
        keeps a heartbeat timer per activity, as it does for toren's.
        """
        heartbeat = timedelta(seconds=heartbeat_s) if heartbeat_s > 0 else None
        step = 0
        while True:
            step += 1
            reply: dict[str, Any] = await workflow.execute_activity(
                MODEL,
                args=[step, turns],
                start_to_close_timeout=MODEL_TIMEOUT,
                heartbeat_timeout=heartbeat,
            )
            calls = reply.get("tool_calls") or []
            if not calls:
                return str(reply["content"])
            await workflow.execute_activity(
                TOOL,
                json.loads(calls[0]["arguments"]),
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=heartbeat,
            )


@workflow.defn(name="PerfFloorParked")
class PerfFloorParked:
    """A "model" call, a wait for an `approve` signal, the "tool" call, a final "model" call.

    The bare-Temporal equivalent of a toren run of one gated tool call.
    """

    def __init__(self) -> None:
        self.approved = False

    @workflow.run
    async def run(self) -> str:
        """Run the sequence, parked between the first model call and the tool."""
        reply: dict[str, Any] = await workflow.execute_activity(
            MODEL, args=[1, 1], start_to_close_timeout=MODEL_TIMEOUT
        )
        workflow.upsert_search_attributes([PARKED.value_set("waiting_approval")])
        await workflow.wait_condition(lambda: self.approved)
        call = reply["tool_calls"][0]
        await workflow.execute_activity(
            TOOL, json.loads(call["arguments"]), start_to_close_timeout=TOOL_TIMEOUT
        )
        done: dict[str, Any] = await workflow.execute_activity(
            MODEL, args=[2, 1], start_to_close_timeout=MODEL_TIMEOUT
        )
        return str(done["content"])

    @workflow.signal
    def approve(self, payload: dict[str, Any]) -> None:
        """Let the tool call run."""
        self.approved = True
