"""The runtime's tool half: `<agent>.<tool>` activities and the approval predicates.

One activity per tool, named `<agent>.<tool>` (renaming one is a breaking change), built per
agent at registration; a dynamic one for MCP tools listed after the worker registered its own;
and `toren.check_approval`, the local activity that evaluates a tool's approval predicate.
What one call does inside its activity is `_tool_call`'s job.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from toren.agent._approval_policy import apply_policy
from toren.agent._tool import Tool
from toren.agent._transcript import tool_message
from toren.agent._types import ApprovalCheck, ApprovalQuestion, ToolCallInput, ToolCallResult
from toren.worker._live import current_stream
from toren.worker._loaded import LoadedAgent
from toren.worker.activities._call_scope import (
    announce_retry,
    failed_in,
    heartbeating,
    live_stream,
)
from toren.worker.activities._served import Served
from toren.worker.activities._tool_call import run_key_of, run_tool_call, validation_text

__all__ = ["ToolActivities"]

log = logging.getLogger("toren")


class ToolActivities(Served):
    """The tool activities and `toren.check_approval`."""

    @activity.defn(name="toren.check_approval")
    async def check_approval(self, question: ApprovalQuestion) -> ApprovalCheck:
        """Evaluate a tool's approval policy on the call's args (recorded in history)."""
        agent, tool, call_id, args = question.agent, question.tool, question.call_id, question.args
        loaded = self._get(agent)
        t = loaded.agent.tools[tool]
        check = ApprovalCheck(gated=True, call_id=call_id, tool=tool)
        if t.approval_kind == "always":
            check.reason = "approval: always"
            return self._shaped(loaded, check, question)
        try:
            check.gated = t.needs_approval(args)
            check.reason = "its approval predicate matched" if check.gated else ""
        except ValidationError as err:
            check.error = loaded.redactor().text(validation_text(err))
        except Exception as err:
            # A broken predicate gates the call: asking a person is the safe answer.
            log.warning(
                "approval predicate of %s.%s raised %s; gating the call",
                agent,
                tool,
                loaded.redactor().text(repr(err)),
            )
            check.reason = f"its approval predicate raised {type(err).__name__}"
        if check.gated and not check.error:
            return self._shaped(loaded, check, question)
        return check

    def _shaped(
        self, loaded: LoadedAgent, check: ApprovalCheck, question: ApprovalQuestion
    ) -> ApprovalCheck:
        """A gated call's check shaped by agent.yaml `approvals:` (its rule, approvers, grant)."""
        policy = loaded.agent.config.approvals
        if policy.approvers is not None or policy.rules:
            check = apply_policy(policy, check, question.args, question.grants)
        if check.gated:
            self.telemetry.approval_requested(question.agent, question.tool)
        return check

    def _tool_activity(self, loaded: LoadedAgent, tool: Tool) -> Callable[..., Any]:
        name = f"{loaded.agent.name}.{tool.name}"
        cache = self.transcripts

        telemetry = self.telemetry

        @activity.defn(name=name)
        async def run_tool(input: ToolCallInput) -> ToolCallResult:
            info = activity.info()
            span = telemetry.tool_call(
                loaded.agent.name,
                tool.name or "",
                input.call_id,
                info.workflow_id or "",
                info.attempt,
            )
            redactor = loaded.redactor()  # once per call: it reads the env and the agent's tools
            live = live_stream(loaded, input.step, redactor, call_id=input.call_id)
            with span as call, failed_in(call, redactor):
                async with heartbeating(), live or contextlib.nullcontext():
                    token = current_stream.set(live)
                    try:
                        if live is not None:
                            announce_retry(live, [])
                        result = await run_tool_call(loaded, tool, input)
                    finally:
                        current_stream.reset(token)
                call.error_result(result.is_error)
                call.content("gen_ai.tool.call.result", result.content, redactor)
            cache.put_tool_result(
                run_key_of(input.run_key),
                input.call_id,
                tool_message(input.call_id, input.tool, result.content, result.is_error),
            )
            return result

        return run_tool

    def _late_tool_activity(self) -> Callable[..., Any]:
        """The dynamic activity running MCP tools listed after the worker registered its own."""

        @activity.defn(dynamic=True)
        async def run_late_tool(args: Sequence[RawValue]) -> ToolCallResult:
            agent, _, name = activity.info().activity_type.partition(".")
            loaded = self._get(agent)
            tool = loaded.agent.tools.get(name)
            if tool is None or not args:
                raise ApplicationError(
                    f"this worker has no tool {name!r} of agent {agent!r}",
                    type="UnknownTool",
                    non_retryable=True,
                )
            input = activity.payload_converter().from_payload(args[0].payload, ToolCallInput)
            result: ToolCallResult = await self._tool_activity(loaded, tool)(input)
            return result

        return run_late_tool
