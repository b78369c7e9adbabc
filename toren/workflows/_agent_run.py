"""The `AgentRun` workflow: the agent loop, tool-call policy, approvals and budgets.

Model call → zero or more tool calls (one turn's calls run concurrently) → back to the model,
until a final answer or a budget ends the run. Everything that can differ between executions
runs in an activity; this module imports no user code, no HTTP client and no model SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from toren._schema import validate_args
    from toren._transcript import EMPTY_DIGEST, chain, tool_message
    from toren._types import (
        AgentSpec,
        ApprovalCheck,
        Carry,
        Decision,
        ModelCallInput,
        ModelCallResult,
        PendingApproval,
        RunInput,
        RunResult,
        ToolCallInput,
        ToolCallResult,
        ToolSpec,
    )
    from toren.errors import RunError
    from toren.workflows import _approvals as approvals

__all__ = ["AgentRun"]

Message = dict[str, Any]

HEARTBEAT_TIMEOUT = timedelta(seconds=10)
"""A worker that stops heartbeating this long is taken as dead and the call is retried."""
DEFAULT_TOOL_TIMEOUT = timedelta(minutes=30)
"""Start-to-close for a tool without `timeout_ms` (heartbeats catch a dead worker sooner)."""
MODEL_TIMEOUT = timedelta(minutes=5)
LOCAL_TOOL_MAX_MS = 10_000
"""Longest `timeout_ms` of a tool that may run as a local activity (effects none, no key)."""
CHILD_OUTPUT_CHARS = 4000
"""A background run's output as `check_run` returns it (and tells the parent) is cut to this."""
MAX_QUEUE_ROUNDS = 10
"""Rounds of tools queued by queued tools before the rest are dropped (a loop guard)."""
AGENT_KEY = SearchAttributeKey.for_keyword("TorenAgent")
STATUS_KEY = SearchAttributeKey.for_keyword("TorenStatus")
PENDING_KEY = SearchAttributeKey.for_int("TorenPendingApprovals")
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=10,
)


@workflow.defn(name="AgentRun")
class AgentRun:
    """One run of an agent. Start it by name with `{"agent": ..., "prompt": ...}`."""

    def __init__(self) -> None:
        self._spec: AgentSpec | None = None
        self._messages: list[Message] = []
        self._digest = EMPTY_DIGEST
        self._since = 0
        self._tail: list[dict[str, Any]] = []
        self._step = 0
        self._tool_calls = 0
        self._usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}
        self._call_ids: set[str] = set()
        self._arguments: dict[str, Any] = {}
        self._attachments: list[str] = []
        self._approvals = approvals.Approvals(on_change=self._sync_status)
        self._state: dict[str, Any] = {}
        self._events: list[dict[str, Any]] = []
        self._queued = 0
        self._status = ""
        self._pending_count = -1
        self._deadline: datetime | None = None
        self._runs = 1
        self._children: dict[str, dict[str, Any]] = {}
        self._watchers: list[asyncio.Future[None]] = []
        self._notices: list[Message] = []
        self._input = RunInput(agent="", prompt="")

    # -- the run --------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        """Run the agent loop to a final answer, or fail with a `RunError` on a budget."""
        self._input = input
        self._arguments = dict(input.arguments or {})
        self._attachments = list(input.attachments or [])
        if input.carry is not None:
            self._restore(input.carry)
        else:
            await self._start(input)
        spec = self._require_spec()
        if spec.max_wall_clock_min is not None and self._deadline is None:
            self._deadline = workflow.now() + timedelta(minutes=spec.max_wall_clock_min)
        self._approvals.publish()
        self._sync_status()
        try:
            if self._deadline is None:
                result = await self._loop()
            else:
                result = await self._with_wall_clock(self._deadline)
        except RunError:
            self._sync_status("failed")
            raise
        self._sync_status("completed")
        return result

    async def _start(self, input: RunInput) -> None:
        try:
            self._spec = await workflow.execute_local_activity(
                "toren.agent_spec",
                input.agent,
                result_type=AgentSpec,
                start_to_close_timeout=timedelta(seconds=30),
                summary=f"load spec of {input.agent}",
            )
        except ActivityError as err:
            raise RunError(
                f"cannot load agent {input.agent!r}: {err.cause or err}", kind="UnknownAgent"
            ) from None
        for message in input.messages or []:
            self._append(message, None)
        self._append({"role": "user", "content": input.prompt}, None)

    # -- continue-as-new at a turn boundary -------------------------------------------------

    def _should_continue(self) -> bool:
        spec = self._require_spec()
        info = workflow.info()
        if any(c["status"] == "running" for c in self._children.values()):
            return False  # a running child's result only reaches this run
        return (
            info.is_continue_as_new_suggested()
            or bool(
                spec.continue_after_events
                and info.get_current_history_length() >= spec.continue_after_events
            )
            or bool(
                spec.continue_after_bytes
                and info.get_current_history_size() >= spec.continue_after_bytes
            )
        )

    async def _continue_as_new(self) -> None:
        # Let signal and update handlers finish so no decision is lost at the boundary.
        await workflow.wait_condition(workflow.all_handlers_finished)
        carry = Carry(
            spec=self._require_spec(),
            messages=self._messages,
            step=self._step,
            tool_calls=self._tool_calls,
            usage=dict(self._usage),
            state=self._state,
            events=self._events,
            call_ids=sorted(self._call_ids),
            queued=self._queued,
            refused=self._approvals.refused,
            children=self._children,
            deadline=self._deadline.isoformat() if self._deadline else None,
            runs=self._runs + 1,
        )
        workflow.logger.info("continuing as new after %d steps (run %d)", self._step, self._runs)
        workflow.continue_as_new(
            RunInput(
                agent=self._input.agent,
                prompt=self._input.prompt,
                arguments=self._input.arguments,
                attachments=self._input.attachments,
                carry=carry,
            )
        )

    def _restore(self, carry: Carry) -> None:
        self._spec = carry.spec
        for message in carry.messages:
            self._append(message, None)
        self._step = carry.step
        self._tool_calls = carry.tool_calls
        self._usage = dict(carry.usage)
        self._state = dict(carry.state)
        self._events = list(carry.events)
        self._call_ids = set(carry.call_ids)
        self._queued = carry.queued
        self._approvals.refused = list(carry.refused)
        self._children = dict(carry.children)
        self._deadline = datetime.fromisoformat(carry.deadline) if carry.deadline else None
        self._runs = carry.runs

    def _sync_status(self, final: str | None = None) -> None:
        """Keep toren's search attributes current (only those the namespace has)."""
        spec = self._spec
        if spec is None or not spec.search_attributes:
            return
        have = set(spec.search_attributes)
        pending = len(self._approvals.pending)
        status = final or ("waiting_approval" if pending else "running")
        updates: list[SearchAttributeUpdate[Any]] = []
        if not self._status and "TorenAgent" in have:
            updates.append(AGENT_KEY.value_set(spec.name))
        if status != self._status and "TorenStatus" in have:
            updates.append(STATUS_KEY.value_set(status))
        if pending != self._pending_count and "TorenPendingApprovals" in have:
            updates.append(PENDING_KEY.value_set(pending))
        self._status, self._pending_count = status, pending
        if updates:
            workflow.upsert_search_attributes(updates)

    async def _with_wall_clock(self, deadline: datetime) -> RunResult:
        spec = self._require_spec()
        minutes = spec.max_wall_clock_min or 0
        loop = asyncio.ensure_future(self._loop())
        left = max(deadline - workflow.now(), timedelta(milliseconds=1))
        timer = asyncio.ensure_future(workflow.sleep(left))
        await workflow.wait([loop, timer], return_when=asyncio.FIRST_COMPLETED)
        if loop.done():
            timer.cancel()
            return loop.result()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError, CancelledError, ActivityError):
            await loop
        raise RunError(
            f"run exceeded maxWallClockMin={minutes:g} after {self._step} steps",
            kind="BudgetExceeded",
        )

    async def _loop(self) -> RunResult:
        spec = self._require_spec()
        while True:
            if self._step > 0 and self._should_continue():
                await self._continue_as_new()
            if self._step >= spec.max_steps:
                raise RunError(
                    f"run exceeded maxStepsPerTask={spec.max_steps} without a final answer",
                    kind="BudgetExceeded",
                )
            self._step += 1
            for notice in self._notices:
                self._append(notice, {"message": notice})
            self._notices = []
            reply = await self._call_model()
            calls = reply.message.get("tool_calls") or []
            if not calls:
                return RunResult(
                    text=str(reply.message.get("content") or ""),
                    steps=self._step,
                    tool_calls=self._tool_calls,
                    usage=dict(self._usage),
                )
            await self._run_turn(calls)

    async def _call_model(self) -> ModelCallResult:
        spec = self._require_spec()
        info = workflow.info()
        try:
            reply: ModelCallResult = await workflow.execute_activity(
                "toren.call_model",
                ModelCallInput(
                    agent=spec.name,
                    run_key=f"{info.workflow_id}/{info.run_id}",
                    count=len(self._messages),
                    digest=self._digest,
                    since=self._since,
                    tail=self._tail,
                    step=self._step,
                    model=spec.model,
                ),
                result_type=ModelCallResult,
                start_to_close_timeout=MODEL_TIMEOUT,
                # A worker that dies mid-call is noticed in seconds, not at the 5-minute timeout.
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=MODEL_RETRY,
                summary=f"model step {self._step} ({spec.model})",
            )
        except ActivityError as err:
            cause = err.cause
            detail = str(cause) if cause else str(err)
            raise RunError(
                f"model call failed at step {self._step}: {detail}", kind="ModelCallFailed"
            ) from None
        for key in ("input_tokens", "output_tokens"):
            self._usage[key] += int(reply.usage.get(key, 0))
        self._messages.append(reply.message)
        self._digest = chain(self._digest, reply.message)
        self._since = len(self._messages)
        self._tail = []
        return reply

    def _append(self, message: Message, ref: dict[str, Any] | None) -> None:
        """Append to the transcript; `ref` tells `call_model` where to find the message.

        `None` means it is already in this run's input: `call_model` asks the workflow for it.
        """
        self._messages.append(message)
        self._digest = chain(self._digest, message)
        if ref is None:
            self._since = len(self._messages)
            self._tail = []
        else:
            self._tail.append(ref)

    async def _run_turn(self, calls: list[dict[str, Any]]) -> None:
        """Run one turn's calls concurrently, then what they queued, then apply their changes.

        Results enter the transcript in call order; so do state writes (the last writer in call
        order wins). Queued tools run after the turn's calls, as if the model had asked for
        them; injected messages come last, right before the model's next step.
        """
        injected: list[Message] = []
        rounds = 0
        while calls:
            results = await asyncio.gather(*(self._run_call(c) for c in calls))
            queued: list[dict[str, Any]] = []
            for message, ref, changes in results:
                self._append(message, ref)
                self._apply(message, changes, injected, queued)
            calls = []
            if queued and rounds >= MAX_QUEUE_ROUNDS:
                names = ", ".join(q["name"] for q in queued)
                injected.append(
                    {
                        "role": "user",
                        "content": f"(toren: queued tool calls dropped after {rounds} rounds "
                        f"of queued calls: {names})",
                    }
                )
            elif queued:
                rounds += 1
                for q in queued:
                    self._queued += 1
                    calls.append(
                        {
                            "id": f"queued_{self._step}_{self._queued}",
                            "name": q["name"],
                            "arguments": json.dumps(q.get("args") or {}),
                        }
                    )
                # As if the model had asked: an assistant turn holding the queued calls.
                turn = {"role": "assistant", "content": "", "tool_calls": calls, "queued": True}
                self._append(turn, {"message": turn})
        for message in injected:
            self._append(message, {"message": message})

    def _apply(
        self,
        message: Message,
        changes: dict[str, Any] | None,
        injected: list[Message],
        queued: list[dict[str, Any]],
    ) -> None:
        if not changes:
            return
        self._state.update(changes.get("state") or {})
        for event in changes.get("events") or []:
            self._events.append(
                {
                    **event,
                    "tool": message.get("name"),
                    "call_id": message.get("tool_call_id"),
                    "step": self._step,
                    "at": workflow.now().isoformat(),
                }
            )
        injected += changes.get("messages") or []
        queued += changes.get("queued") or []

    # -- one tool call --------------------------------------------------------------------

    async def _run_call(
        self, call: dict[str, Any]
    ) -> tuple[Message, dict[str, Any], dict[str, Any] | None]:
        """Run one tool call under its contract; return its result message and how to cite it."""
        spec = self._require_spec()
        name = str(call.get("name", ""))
        use_id = str(call.get("id") or f"call_{self._step}")
        call_id = use_id if use_id not in self._call_ids else f"{use_id}-{self._step}"
        self._call_ids.add(call_id)
        self._tool_calls += 1

        def error(text: str) -> tuple[Message, dict[str, Any], None]:
            message = tool_message(use_id, name, text, True)
            return message, {"message": message}, None

        tool = next((t for t in spec.tools if t.name == name), None)
        if tool is None:
            return error(f"unknown tool: {name}")
        args, problem = _parse_args(call.get("arguments"))
        if problem is None:
            problem = validate_args(tool.schema, args)
        if problem is not None:
            return error(f"invalid arguments for {name}: {problem}")

        gate = await self._check_gate(tool, call_id, args)
        if gate.error is not None:
            return error(f"invalid arguments for {name}: {gate.error}")
        if gate.gated:
            decision = await self._await_decision(tool, call_id, args, gate.reason)
            if not decision.approved:
                comment = f": {decision.comment}" if decision.comment else ""
                return error(f"denied by {decision.by}{comment}")

        if tool.native:
            text, failed = await self._run_native(tool, use_id, args)
            message = tool_message(use_id, name, text, failed)
            return message, {"message": message}, None

        result = await self._execute_tool(tool, call_id, use_id, args)
        message = tool_message(use_id, name, result.content, result.is_error)
        return message, {"call_id": use_id}, result.changes

    # -- background runs (run_process / check_run) ---------------------------------------------

    async def _run_native(
        self, tool: ToolSpec, use_id: str, args: dict[str, Any]
    ) -> tuple[str, bool]:
        spec = self._require_spec()
        if tool.native == "check_run":
            run_id = str(args.get("run_id", ""))
            child = self._children.get(run_id)
            if child is None:
                known = ", ".join(self._children) or "none"
                return f"unknown run_id {run_id!r} (this run started: {known})", True
            return json.dumps({"run_id": run_id, **child}), False
        name = str(args.get("process", ""))
        process = spec.processes.get(name)
        if process is None:
            return f"unknown process {name!r} (known: {', '.join(spec.processes)})", True
        child_id = f"{workflow.info().workflow_id}/{name}/{use_id}"
        if child_id in self._children:
            return json.dumps({"run_id": child_id, "process": name, "started": False}), False
        text = str(args.get("input", ""))
        child_input: Any = (
            RunInput(agent=process["agent"], prompt=text)
            if process["workflow"] == "AgentRun"
            else text
        )
        try:
            handle = await workflow.start_child_workflow(
                process["workflow"],
                child_input,
                id=child_id,
                task_queue=process["task_queue"],
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"{name}: {text.splitlines()[0][:100] if text else ''}",
            )
        except WorkflowAlreadyStartedError:
            # Started before (e.g. by an earlier run of this chain): the same child, not a new one.
            self._children[child_id] = {"process": name, "status": "running"}
            return json.dumps({"run_id": child_id, "process": name, "started": False}), False
        self._children[child_id] = {"process": name, "status": "running"}
        self._watchers.append(asyncio.ensure_future(self._watch(child_id, name, handle)))
        return json.dumps({"run_id": child_id, "process": name, "started": True}), False

    async def _watch(self, child_id: str, name: str, handle: Any) -> None:
        try:
            result = await handle
        except ChildWorkflowError as err:
            error = str(err.cause or err)[:CHILD_OUTPUT_CHARS]
            self._children[child_id] = {"process": name, "status": "failed", "error": error}
            note = f"Background run {child_id} ({name}) failed: {error}"
        else:
            output = result.get("text") if isinstance(result, dict) and "text" in result else result
            text = output if isinstance(output, str) else json.dumps(output, default=str)
            text = text[:CHILD_OUTPUT_CHARS]
            self._children[child_id] = {"process": name, "status": "completed", "output": text}
            note = f"Background run {child_id} ({name}) completed. Output:\n{text}"
        self._notices.append({"role": "user", "content": note})

    async def _check_gate(
        self, tool: ToolSpec, call_id: str, args: dict[str, Any]
    ) -> ApprovalCheck:
        if tool.approval == "never":
            return ApprovalCheck(gated=False, call_id=call_id, tool=tool.name)
        # Also for `always`: the recorded result is the ApprovalRequested entry of the event log.
        spec = self._require_spec()
        check: ApprovalCheck = await workflow.execute_local_activity(
            "toren.check_approval",
            args=[spec.name, tool.name, call_id, args],
            result_type=ApprovalCheck,
            start_to_close_timeout=timedelta(seconds=30),
            summary=f"approval policy of {tool.name}",
        )
        return check

    async def _await_decision(
        self, tool: ToolSpec, call_id: str, args: dict[str, Any], reason: str
    ) -> Decision:
        spec = self._require_spec()
        timeout_s = tool.approval_timeout_s or spec.approval_timeout_s
        now = workflow.now()
        pending = PendingApproval(
            call_id=call_id,
            tool=tool.name,
            args=args,
            requested_at=now.isoformat(),
            reason=reason,
            step=self._step,
            expires_at=(now + timedelta(seconds=timeout_s)).isoformat() if timeout_s else None,
        )
        self._approvals.request(pending)
        try:
            await workflow.wait_condition(
                lambda: self._approvals.decided(call_id),
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=f"approval of {tool.name} expires",
            )
        except TimeoutError:
            self._approvals.expire(call_id, timeout_s or 0.0)
        return self._approvals.take(call_id)

    async def _execute_tool(
        self, tool: ToolSpec, call_id: str, use_id: str, args: dict[str, Any]
    ) -> ToolCallResult:
        spec = self._require_spec()
        info = workflow.info()
        max_attempts = tool.max_attempts or spec.max_attempts
        if tool.timeout_ms:
            # Above the handler's own race, so the handler's timeout result wins.
            close = timedelta(milliseconds=tool.timeout_ms) + max(
                timedelta(seconds=5), timedelta(milliseconds=tool.timeout_ms) / 10
            )
        else:
            close = DEFAULT_TOOL_TIMEOUT
        call_input = ToolCallInput(
            run_key=f"{info.workflow_id}/{info.run_id}",
            call_id=use_id,
            tool=tool.name,
            args=args,
            idempotency_key=f"{info.workflow_id}:{self._step}:{use_id}",
            step=self._step,
            arguments=self._arguments or None,
            attachments=self._attachments or None,
        )
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1), maximum_attempts=max_attempts or 0
        )
        try:
            if _runs_locally(tool):
                # A short pure lookup: a local activity saves a server round trip and two events;
                # running it twice after a crash is harmless by its own declaration.
                result: ToolCallResult = await workflow.execute_local_activity(
                    f"{spec.name}.{tool.name}",
                    call_input,
                    result_type=ToolCallResult,
                    start_to_close_timeout=close,
                    retry_policy=retry,
                    summary=_summary(tool.name, args),
                )
            else:
                result = await workflow.execute_activity(
                    f"{spec.name}.{tool.name}",
                    call_input,
                    result_type=ToolCallResult,
                    start_to_close_timeout=close,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=retry,
                    summary=_summary(tool.name, args),
                )
            return result
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            if max_attempts:
                return ToolCallResult(
                    f"tool {tool.name} failed closed after {max_attempts} attempts", True
                )
            return ToolCallResult(f"tool {tool.name} failed: {err.cause or err}", True)

    # -- approvals: signals, update, queries -----------------------------------------------

    @workflow.signal(description=approvals.APPROVE_HELP)
    def approve(self, *payload: Any) -> None:
        """Approve a waiting call: `{"call_id": ..., "by": ..., "comment": ...}`."""
        self._approvals.on_signal("approve", payload)

    @workflow.signal(description=approvals.DENY_HELP)
    def deny(self, *payload: Any) -> None:
        """Deny a waiting call: `{"call_id": ..., "by": ..., "comment": ...}`."""
        self._approvals.on_signal("deny", payload)

    @workflow.update(description=approvals.DECIDE_HELP)
    def decide(self, request: dict[str, Any]) -> Decision:
        """Approve or deny a waiting call and get the recorded decision back."""
        return self._approvals.on_update(request)

    @decide.validator
    def _validate_decide(self, request: dict[str, Any]) -> None:
        self._approvals.validate_update(request)

    @workflow.query(description="Calls waiting for a decision: call_id, tool, args, since when.")
    def pending_approvals(self) -> list[PendingApproval]:
        """The calls waiting for a person."""
        return self._approvals.pending_list()

    @workflow.query(description="Approval signals refused (malformed, unknown call, decided).")
    def refused_signals(self) -> list[dict[str, Any]]:
        """Every refused approval signal, with why."""
        return list(self._approvals.refused)

    @workflow.query(description="The transcript from index `start` (used by toren.call_model).")
    def transcript(self, start: int = 0, end: int | None = None) -> list[Message]:
        """The conversation so far, or a slice of it."""
        return self._messages[start:end]

    @workflow.query(description="The run's key-value state (ctx.get_value / ctx.set_value).")
    def state(self) -> dict[str, Any]:
        """The run's durable key-value state."""
        return dict(self._state)

    @workflow.query(description="Events tools emitted (ctx.emit), from index `offset`.")
    def events(self, offset: int = 0) -> list[dict[str, Any]]:
        """Emitted events from `offset` on, each with its index as `offset`."""
        return [{"offset": i, **e} for i, e in enumerate(self._events) if i >= offset]

    @workflow.query(description="Step, tool calls and token usage so far.")
    def progress(self) -> dict[str, Any]:
        """How far the run is."""
        return {
            "step": self._step,
            "tool_calls": self._tool_calls,
            "usage": dict(self._usage),
            "pending": len(self._approvals.pending),
        }

    def _require_spec(self) -> AgentSpec:
        if self._spec is None:
            raise ApplicationError("agent spec not loaded", non_retryable=True)
        return self._spec


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
