"""One tool call under its contract, inside `AgentRun`: checks, approval, then the activity.

Unknown tool or invalid arguments → an error result, no activity. A gated call asks the
approval policy (a recorded local activity) and waits for a person. Then the call runs as the
activity `<agent>.<tool>` whose timeouts and retries come from the tool's declaration, or as a
local activity when it is a short pure lookup. Workflow-side code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from toren.agent._schema import validate_args
    from toren.agent._spec import (
        DEFAULT_TOOL_ATTEMPTS,
        DEFAULT_TOOL_TIMEOUT_MS,
        AgentSpec,
        ToolSpec,
    )
    from toren.agent._transcript import tool_message
    from toren.agent._types import (
        RunInput,
        RunState,
        ToolCallInput,
        ToolCallResult,
    )
    from toren.workflows._agent_tools import AgentTools
    from toren.workflows._approvals import Approvals
    from toren.workflows._background import Background
    from toren.workflows._eval_calls import EvalRecord
    from toren.workflows._gate import Gate
    from toren.workflows._handoff import request_handoff
    from toren.workflows._questions import Questions

__all__ = ["CallOutcome", "Publish", "ToolCalls", "flow_id"]

Message = dict[str, Any]
Publish = Callable[[str, dict[str, Any]], None]
"""Publishes a live item of a type with its fields (the run adds `run_id` and `step`)."""

LOCAL_TOOL_MAX_MS = 10_000
"""Longest `timeout_ms` of a tool that may run as a local activity (effects none, no key)."""
LOCAL_FAILS_CLOSED = "toren-local-tool-fails-closed"
"""The patch under which a local tool call out of attempts fails closed instead of the run."""
CANCEL_ENDS_CANCELLED = "toren-cancel-ends-cancelled"
"""The patch under which a run cancelled during a tool call ends cancelled, not failed."""


@dataclass
class CallOutcome:
    """A finished call: its transcript message, where `call_model` finds it, what it changed."""

    message: Message
    ref: dict[str, Any]
    """`{"call_id": id}` when a tool activity produced the message (the worker has it), else
    `{"message": ...}`: the workflow made it, so the reference carries it."""
    changes: dict[str, Any] | None = None


class ToolCalls:
    """Runs the tool calls of one run under their contracts."""

    def __init__(
        self,
        run: RunState,
        input: RunInput,
        approvals: Approvals,
        background: Background,
        publish: Publish | None = None,
    ) -> None:
        self._run = run
        self._publish: Publish = publish or (lambda type_, fields: None)
        """Publishes a live item (`toren.worker._live`) on the run's stream."""
        self._input = input
        """The run's input (its invocation arguments and attachments reach every call)."""
        self._approvals = approvals
        self._background = background
        self._workspace_lock = asyncio.Lock()
        self.agent_tools = AgentTools(run, background.on_usage, self._publish)
        """Agents as tools: their children, and the calls waiting in them."""
        self._gate = Gate(run, approvals, self.agent_tools.relay(self._publish))
        self.questions = Questions(run, approvals, self._publish)
        """Questions the calls ask a person (`ask_human`, `ctx.ask`)."""
        approvals.extra_details = self.questions.details

    @property
    def _spec(self) -> AgentSpec:
        assert self._run.spec is not None
        return self._run.spec

    async def run_call(self, call: dict[str, Any], cut: bool = False) -> CallOutcome:
        """Run one call the model (or a tool) asked for; never raises for a bad call.

        `cut`: the reply asking for it was cut at `maxTokens`.
        """
        run = self._run
        name = str(call.get("name", ""))
        use_id = str(call.get("id") or f"call_{run.step}")
        call_id = use_id if use_id not in run.call_ids else f"{use_id}-{run.step}"
        run.call_ids.append(call_id)
        run.tool_calls += 1
        tool = next((t for t in self._spec.tools if t.name == name), None)
        if tool is None or tool.progress_argument is None:
            # A tool with a progress argument was announced by the model call, as it streamed.
            self._publish("tool_call_started", {"call_id": use_id, "name": name, "progress": None})
        outcome = await self._run_call(call, cut, name, use_id, call_id)
        self._publish(
            "tool_call_completed",
            {"call_id": use_id, "name": name, "is_error": bool(outcome.message.get("is_error"))},
        )
        return outcome

    async def _run_call(
        self, call: dict[str, Any], cut: bool, name: str, use_id: str, call_id: str
    ) -> CallOutcome:

        def made_here(text: str, failed: bool = True) -> CallOutcome:
            message = tool_message(use_id, name, text, failed)
            return CallOutcome(message, {"message": message})

        tool = next((t for t in self._spec.tools if t.name == name), None)
        if tool is None:
            return made_here(f"unknown tool: {name}")
        if tool.execution_mode == "provider":
            # Its provider runs it inside the model call (the reply carries its result in
            # `provider_calls`); one that reaches here as a plain call is never scheduled.
            return made_here(
                f"tool {name} is run by {tool.execution_provider} inside the model call, not "
                "by toren; nothing ran"
            )
        args, problem = _parse_args(call.get("arguments"))
        if problem is None:
            problem = validate_args(tool.schema, args)
        if problem is not None and cut:
            # Cut arguments are not JSON (OpenAI-style servers; the provider sends `{}` back in
            # their place) or a partial object (Anthropic): either way, this tells the model.
            return made_here(
                f"invalid arguments for {name}: your reply was cut at maxTokens="
                f"{self._spec.max_tokens} before these arguments were complete ({problem}); "
                "nothing ran. Call it again with complete arguments, in a shorter reply."
            )
        if problem is not None:
            return made_here(f"invalid arguments for {name}: {problem}")

        if tool.native == "handoff":  # `toren.workflows._handoff`: taken at the turn's end
            return made_here(*request_handoff(self._run, tool, args))
        if self._run.eval is not None:
            return await self._eval_call(tool, use_id, call_id, args)

        gate = await self._gate.check(tool, call_id, args)
        if gate.error is not None:
            return made_here(f"invalid arguments for {name}: {gate.error}")
        if gate.gated:
            decision = await self._gate.await_decision(tool, call_id, args, gate)
            while (again := await self._gate.edit_needs(tool, call_id, decision)) is not None:
                # The edited call needs approvers its decider is not: it waits for them.
                args = decision.args or args
                decision = await self._gate.await_decision(tool, call_id, args, again)
            if not decision.approved:
                comment = f": {decision.comment}" if decision.comment else ""
                return made_here(f"denied by {decision.by}{comment}")
            args = decision.args if decision.args is not None else args

        if tool.native == "ask_human":
            return made_here(*await self.questions.ask_human(tool, call_id, args))
        if tool.native and tool.native.startswith("agent:"):
            return made_here(*await self.agent_tools.call(tool, call_id, args))
        if tool.native:
            text, failed = await self._background.run_native(tool, use_id, args)
            return made_here(text, failed)

        result = await self._execute(tool, use_id, args)
        message = tool_message(use_id, name, result.content, result.is_error)
        return CallOutcome(message, {"call_id": use_id}, result.changes)

    async def _eval_call(
        self, tool: ToolSpec, use_id: str, call_id: str, args: dict[str, Any]
    ) -> CallOutcome:
        """An eval run's call: what its `effects` allow (`toren.workflows._eval_calls`).

        `external` (or any effects but `none` and `sandbox`: the safe reading of a value this
        release does not know) is answered from the record, never executed; a gated call takes
        the recorded decision without waiting, or is answered "would ask a person".
        """
        record = EvalRecord(self._run)
        recorded = record.match(tool.name, args)  # before any await: call order decides

        def made_here(text: str, failed: bool = True) -> CallOutcome:
            message = tool_message(use_id, tool.name, text, failed)
            return CallOutcome(message, {"message": message})

        gate = await self._gate.check(tool, call_id, args)
        if gate.error is not None:
            return made_here(f"invalid arguments for {tool.name}: {gate.error}")
        # `ask_human` asks a person: answered from the record, like an `external` call.
        runs_here = tool.effects in ("none", "sandbox") and tool.native != "ask_human"
        decided = gate.gated
        if gate.gated:
            decision = recorded.decision if recorded is not None else None
            if decision is None:
                return made_here(record.would_ask(call_id, tool.name))
            if not decision["approved"]:
                record.note(call_id, tool.name, "denied", recorded, decided=True)
                comment = f": {decision['comment']}" if decision.get("comment") else ""
                return made_here(f"denied by {decision.get('by') or 'unknown'}{comment}")
        if not runs_here:
            if recorded is None:
                return made_here(record.diverged(call_id, tool.name, args))
            record.note(call_id, tool.name, "recorded", recorded, decided=decided)
            return made_here(str(recorded.call["result"]), bool(recorded.call.get("is_error")))
        if decided:
            record.note(call_id, tool.name, "executed", recorded, decided=True)
        if tool.native:
            text, failed = await self._background.run_native(tool, use_id, args)
            return made_here(text, failed)
        restore = recorded.call.get("workspace") if recorded is not None else None
        result = await self._execute(tool, use_id, args, restore=restore)
        message = tool_message(use_id, tool.name, result.content, result.is_error)
        return CallOutcome(message, {"call_id": use_id}, result.changes)

    async def _execute(
        self, tool: ToolSpec, use_id: str, args: dict[str, Any], restore: str | None = None
    ) -> ToolCallResult:
        """Run the call's activity; `restore`: over this workspace version (an eval's)."""
        if tool.workspace:
            # Workspace calls run one at a time, in the order the model asked for them: each
            # starts from the version the one before it recorded, and records the one it leaves.
            async with self._workspace_lock:
                if restore:
                    self._run.workspace = restore
                result = await self._activity(tool, use_id, args)
        else:
            result = await self._activity(tool, use_id, args)
        if result.workspace:  # any tool may use it (ctx.workspace(), ctx.run_code)
            self._run.workspace = result.workspace
        return result

    async def _activity(
        self, tool: ToolSpec, use_id: str, args: dict[str, Any], answers: list[Any] | None = None
    ) -> ToolCallResult:
        spec = self._spec
        info = workflow.info()
        max_attempts = tool.max_attempts or spec.max_attempts or DEFAULT_TOOL_ATTEMPTS
        timeout = timedelta(milliseconds=tool.timeout_ms or DEFAULT_TOOL_TIMEOUT_MS)
        # Above the handler's own race, so the handler's timeout result wins.
        close = timeout + max(timedelta(seconds=5), timeout / 10)
        flow, start = flow_id(info.workflow_id, self._run), self._run.execution_start
        execution = {"flow_id": flow, "step_count": self._run.step, "start": start}
        call_input = ToolCallInput(
            call_id=use_id,
            tool=tool.name,
            args=args,
            idempotency_key=f"{info.workflow_id}:{_step_of(self._run)}:{use_id}",
            step=self._run.step,
            arguments=self._input.arguments or None,
            attachments=self._input.attachments or None,
            user_id=self._input.user_id,
            context=dict(self._run.context) or None,
            env=dict(self._run.env) or None,
            # A run's own execution goes without saying: the activity takes the workflow id,
            # `step` and 0 (a thread's executions are named).
            execution=None if (flow, start) == (info.workflow_id, 0) else execution,
            workspace=self._run.workspace,
            answers=answers,
        )
        local = _runs_locally(tool)
        if local:
            # Its own workflow task is open while it runs: the run cannot answer its queries
            # (`state`, `transcript_segment`), so the call takes their answers along. A local
            # activity's input never enters history (its marker records the result only).
            call_input.state = dict(self._run.state)
            call_input.transcript = {"prior": self._run.prior, "messages": list(self._run.messages)}
        retry = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=max_attempts)
        activity_type = f"{spec.name}.{tool.name}"
        try:
            if local:
                # A short pure lookup: a local activity saves a server round trip and two events;
                # running it twice after a crash is harmless by its own declaration.
                result: ToolCallResult = await workflow.execute_local_activity(
                    activity_type,
                    call_input,
                    result_type=ToolCallResult,
                    start_to_close_timeout=close,
                    retry_policy=retry,
                    summary=_summary(tool.name, args),
                )
            else:
                result = await workflow.execute_activity(
                    activity_type,
                    call_input,
                    result_type=ToolCallResult,
                    start_to_close_timeout=close,
                    # Notices a dead worker's call long before its timeout.
                    heartbeat_timeout=self._spec.heartbeat_timeout(close),
                    retry_policy=retry,
                    summary=_summary(tool.name, args),
                )
            if result.ask is not None:  # the handler asks a person (`ctx.ask`), then runs again
                return await self.questions.answered(
                    tool, use_id, result, answers or [],
                    lambda more: self._activity(tool, use_id, args, more),
                )  # fmt: skip
            return result
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                # The run was cancelled (by a person, or with its parent): it ends cancelled.
                # Runs cancelled so before this patch failed as a toren bug: replay says so.
                if not workflow.patched(CANCEL_ENDS_CANCELLED):
                    raise
                raise err.cause from None
            return _failed_closed(tool, max_attempts)
        except (ApplicationError, ActivityTimeout):
            # A local activity out of attempts raises its last failure as it is, not wrapped
            # in an `ActivityError`: the same contract holds. (Runs that failed here before
            # this patch fail again on replay, as recorded.)
            if not workflow.patched(LOCAL_FAILS_CLOSED):
                raise
            return _failed_closed(tool, max_attempts)


def _failed_closed(tool: ToolSpec, max_attempts: int) -> ToolCallResult:
    """The contract's result for a call that used up its attempts."""
    return ToolCallResult(f"tool {tool.name} failed closed after {max_attempts} attempts", True)


def flow_id(workflow_id: str, run: RunState) -> str:
    """The current execution's id: the workflow id, plus `#n` for a thread's n-th message."""
    return f"{workflow_id}#{run.execution}" if run.execution else workflow_id


def _step_of(run: RunState) -> str:
    """The step part of an idempotency key: a thread's steps restart with each execution."""
    return f"{run.execution}.{run.step}" if run.execution else str(run.step)


def _runs_locally(tool: ToolSpec) -> bool:
    """Whether a call runs as a local activity: no effects, no key, a short timeout."""
    return (
        tool.effects == "none"
        and tool.idempotency == "none"
        and tool.timeout_ms is not None
        and tool.timeout_ms <= LOCAL_TOOL_MAX_MS
    )


def _parse_args(raw: Any) -> tuple[dict[str, Any], str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as err:
            return {}, f"not valid JSON: {err}"
    if not isinstance(raw, dict):
        return {}, f"expected a JSON object, got {type(raw).__name__}"
    return raw, None


def _summary(tool: str, args: dict[str, Any]) -> str:
    text = json.dumps(args, ensure_ascii=False, separators=(", ", ": "))
    inner = text[1:-1] if text.startswith("{") else text
    if len(inner) > 160:
        inner = inner[:157] + "…"
    return f"{tool}({inner})"
