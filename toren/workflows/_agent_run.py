"""The `AgentRun` workflow: the agent loop, its budgets and continue-as-new.

Model call → zero or more tool calls (one turn's calls run concurrently) → back to the model,
until a final answer or a budget ends the run. Everything the run carries is one `RunState`
(`self._run`); continue-as-new passes it whole. The rooms beside this one: `_model_step` (one
model call), `_tool_calls` (one tool call under its contract), `_approvals` (pending calls,
decisions, refused signals), `_run_handlers` (the signals, update and queries this class
inherits), `_background` (child runs), `_status` (the inbox's search attributes), `_output`
(the final answer, checked against a typed `output:`), `_text_calls` (a final answer that is
only a tool call written as text goes back to the model once). Everything that can differ between
executions runs in an activity; this package imports no user code, no HTTP client and no model
SDK (a test holds it to that).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec
    from toren.agent._transcript import TranscriptRef
    from toren.agent._types import CUT_AT_MAX_TOKENS, STREAM_TOPIC, RunInput, RunResult, RunState
    from toren.errors import InvalidJSONPayloadError, RunError
    from toren.workflows import _approvals as approvals
    from toren.workflows._agent_tools import adopt_tree, earliest_deadline
    from toren.workflows._background import Background
    from toren.workflows._budget import Budget
    from toren.workflows._context_window import ContextWindow
    from toren.workflows._handoff import take_handoff
    from toren.workflows._input import StartInput, one_raw_input, parse_run_input
    from toren.workflows._model_step import call_model
    from toren.workflows._origin import headline, opening, steps_before
    from toren.workflows._output import final_result, output_item
    from toren.workflows._race import unless
    from toren.workflows._run_handlers import RunHandlers
    from toren.workflows._status import StatusAttributes
    from toren.workflows._stream_state import LiveStream, carried_stream, stream_state_json
    from toren.workflows._text_calls import send_back
    from toren.workflows._tool_calls import ToolCalls

__all__ = ["AgentRun", "toren_bug"]

Message = dict[str, Any]

MAX_QUEUE_ROUNDS = 10
"""Rounds of tools queued by queued tools before the rest are dropped (a loop guard)."""


def toren_bug(err: Exception, workflow_type: str) -> ApplicationError:
    """A bug in toren's workflow code, as the failure that ends the run.

    As a workflow task failure it would retry forever and leave the run stuck; a failed run
    tells its caller and can be reset.
    """
    workflow.logger.exception("toren bug in %s", workflow_type)
    return ApplicationError(
        f"toren bug: {type(err).__name__}: {err} (the run cannot go on; please report it with "
        "`toren events` of this run)",
        type="TorenBug",
        non_retryable=True,
    )


# No `versioning_behavior` here: Temporal refuses one from an unversioned worker. A versioned
# worker pins toren's runs by its default (`toren.connect._deployment`): a run finishes on the
# Worker Deployment Version it started on, with the tool code and instructions a person approved
# against.
@workflow.defn(name="AgentRun", failure_exception_types=[InvalidJSONPayloadError])
class AgentRun(RunHandlers):
    """One run of an agent. Start it by name with `{"agent": ..., "prompt": ...}`."""

    # Set up by `run` once the state is known (fresh, or carried from the previous run).
    _input: RunInput
    _transcript: TranscriptRef
    _background: Background
    _calls: ToolCalls

    _STREAM_PATH: tuple[str, ...] = ("carry", "stream")
    """Where a continued run's raw input holds the live stream's state."""

    @workflow.init
    @one_raw_input
    def __init__(self, *args: RawValue) -> None:
        # Any start reaches here, even one with no input or an unreadable one: `run` refuses it.
        self._start = StartInput(args)
        # Signal handlers and queries may run before `run` starts, so these exist from here.
        # The live stream's handlers too: an activity may publish before `run` runs.
        self._stream = LiveStream(carried_stream(self._start.value, *self._STREAM_PATH))
        self._live = self._stream.topic(STREAM_TOPIC)
        self._run = RunState()
        self._approvals = approvals.Approvals(
            refused=lambda: self._run.refused,
            on_change=self._sync_status,
            headline=self._headline,
            schema_of=self._tool_schema,
        )
        self._status = StatusAttributes()
        self._window: ContextWindow = ContextWindow(self)  # prompts fit its window
        self._executing = False
        """Whether an execution is under way (always, once an `AgentRun` has started)."""

    # -- the run --------------------------------------------------------------------------

    @workflow.run
    @one_raw_input
    async def run(self, *args: RawValue) -> RunResult:
        """Run the agent loop to a final answer, or fail with a `RunError` on a budget.

        `args` is what the run was started with, undecoded (read and checked here, not by the
        SDK, so a wrong input fails the run instead of retrying its first task forever).
        """
        try:
            return await self._execute(parse_run_input(self._start.check("AgentRun")))
        except (ApplicationError, CancelledError):
            raise  # deliberate: a RunError, a wrong input, or a cancellation
        except Exception as err:
            raise toren_bug(err, "AgentRun") from err

    async def _execute(self, input: RunInput) -> RunResult:
        self._input = input = adopt_tree(input, self._run)  # an agent tool's child: its budget
        self._executing = True
        if input.carry is not None:
            # Refusals recorded by signals handled before this first task are this run's too.
            input.carry.refused.extend(self._run.refused)
            self._run = input.carry
            if workflow.patched("toren-spec-per-run"):
                # Never trust a policy from input: record the spec again for this run.
                self._run.spec = await self._load_spec(self._run.agent or input.agent)
        else:
            self._run.spec = await self._load_spec(input.agent)
        self._transcript = TranscriptRef(self._run.messages, self._run.prior)
        self._budget = Budget(self._run)
        self._background = Background(self._run, self._budget.add_child)
        self._calls = ToolCalls(
            self._run, input, self._approvals, self._background, publish=self.publish
        )
        if input.carry is None:
            self._transcript.append_input(opening(self._run, input))
        try:
            result = await self._answer()
        except RunError as err:
            self._sync_status("failed")
            self.publish("run_failed", {"error": err.message, "kind": err.type or "RunError"})
            await self._close_stream()
            # The usage travels with the failure: a parent run counts a failed child's too.
            raise RunError(err.message, err.kind, self._budget.receipt()) from None
        self._sync_status("completed")
        done = {"text": result.text, "steps": result.steps, "tool_calls": result.tool_calls}
        self.publish("run_completed", {**done, **output_item(result)})
        await self._close_stream()
        return result

    def publish(self, type_: str, fields: dict[str, Any]) -> None:
        """Publish a live item (`toren.worker._live`): its `type`, `run_id`, `step`, then `fields`.

        Everything here comes from the run's state and recorded results, which the worker
        redacted before they reached history.
        """
        item = {"type": type_, "run_id": workflow.info().workflow_id, "step": self._run.step}
        self._live.publish({**item, **fields})

    async def _close_stream(self) -> None:
        """Let subscribers read the last items, then let the run end with no poll open."""
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def _answer(self) -> RunResult:
        """Run the loop for the message at the transcript's end, within the wall-clock budget."""
        spec = self._spec
        if spec.max_wall_clock_min is not None and self._run.deadline is None:
            deadline = workflow.now() + timedelta(minutes=spec.max_wall_clock_min)
            self._run.deadline = deadline.isoformat()
        self._run.deadline = earliest_deadline(self._run)
        self._approvals.publish()
        self._sync_status()
        if self._run.deadline is None:
            return await self._loop()
        return await self._with_wall_clock(datetime.fromisoformat(self._run.deadline))

    async def _load_spec(self, agent: str) -> AgentSpec:
        try:
            spec: AgentSpec = await workflow.execute_local_activity(
                "toren.agent_spec",
                agent,
                result_type=AgentSpec,
                start_to_close_timeout=timedelta(seconds=30),
            )
        except ActivityError as err:
            cause = err.cause
            kind = cause.type if isinstance(cause, ApplicationError) and cause.type else None
            raise RunError(
                f"cannot load agent {agent!r}: {cause or err}", kind=kind or "UnknownAgent"
            ) from None
        return spec

    def _headline(self) -> str:
        """What a person sees first in the Web UI: which agent, asked what, how far."""
        return headline(self._input, self._run) if hasattr(self, "_input") else ""

    @property
    def _spec(self) -> AgentSpec:
        if self._run.spec is None:
            raise RunError("agent spec not loaded", kind="RunError")
        return self._run.spec

    # -- continue-as-new at a turn boundary -------------------------------------------------

    def _should_continue(self) -> bool:
        spec = self._spec
        info = workflow.info()
        if self._background.running() or self._calls.agent_tools.running():
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

    async def _continue_as_new(self, *, upgrade: bool = False) -> None:
        """Continue as new with the run's state; `upgrade`: onto the current version.

        A pinned run's next run stays on its version; `upgrade` (a thread at rest) starts the
        next run on the deployment's current version instead (unversioned: no difference).
        """
        # Let signal and update handlers finish so no decision is lost at the boundary; the
        # stream's polls return, and their subscribers follow to the next run.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.logger.info(
            "continuing as new after %d steps (run %d)", self._run.step, self._run.runs
        )
        carried = dataclasses.replace(
            self._run,
            messages=[],
            prior=self._prior_reference(),
            runs=self._run.runs + 1,
            stream=stream_state_json(self._stream.get_state()),
        )
        workflow.continue_as_new(
            self._next_input(carried),
            initial_versioning_behavior=(
                workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if upgrade else None
            ),
        )

    def _prior_reference(self) -> dict[str, Any]:
        """How the next run of the chain finds this one's transcript: by asking this run."""
        return self._transcript.reference(workflow.info().run_id)

    def _next_input(self, carried: RunState) -> Any:
        """The next run's input, carrying `carried`."""
        return self._input.continued_with(carried)

    def _sync_status(self, final: str | None = None) -> None:
        waiting = len(self._approvals.pending) + self._questions_waiting()
        home = self._input.agent if hasattr(self, "_input") else ""  # the owner, after a handoff
        self._status.sync(self._run.spec, waiting, final, home)

    async def _with_wall_clock(self, deadline: datetime) -> RunResult:
        minutes = self._spec.max_wall_clock_min or 0
        left = max(deadline - workflow.now(), timedelta(milliseconds=1))
        result = await unless(self._loop(), workflow.sleep(left))
        if result is not None:
            return result
        raise RunError(
            f"run exceeded maxWallClockMin={minutes:g} after {self._run.step} steps",
            kind="BudgetExceeded",
        )

    # -- the loop -------------------------------------------------------------------------

    async def _loop(self) -> RunResult:
        spec, run = self._spec, self._run
        while True:
            if run.step > 0 and self._should_continue():
                await self._continue_as_new()
            if run.step - steps_before(run) >= spec.max_steps:
                raise RunError(
                    f"run exceeded maxStepsPerTask={spec.max_steps} without a final answer",
                    kind="BudgetExceeded",
                )
            run.step += 1
            self._approvals.publish()  # the details say how far the run got
            for notice in run.notices:
                self._transcript.append(notice, {"message": notice})
            run.notices.clear()
            reply = await call_model(
                spec, run, self._transcript, self._budget, self.publish, self._window
            )
            calls = reply.message.get("tool_calls") or []
            if not calls:
                if send_back(spec, run, self._transcript, reply.message):
                    continue  # a tool call written as text: the model is told to make it
                result = final_result(spec, run, self._transcript, reply.message)
                if result is None:
                    continue  # it did not match `output:` and went back to the model
                return result
            cut = reply.finish_reason == CUT_AT_MAX_TOKENS
            # The transcript has its message; the rest of it need not stay while a call waits.
            del reply
            await self._run_turn(calls, cut=cut)
            spec = await take_handoff(run, self._transcript.count, self._load_spec, self.publish)

    async def _run_turn(self, calls: list[dict[str, Any]], cut: bool = False) -> None:
        """Run one turn's calls concurrently, then what they queued, then apply their changes.

        Results enter the transcript in call order; so do state writes (the last writer in call
        order wins). Queued tools run after the turn's calls, as if the model had asked for
        them; injected messages come last, right before the model's next step. `cut`: the
        model's reply was cut at `maxTokens`, so its unreadable arguments are explained as such.
        """
        run = self._run
        injected: list[Message] = []
        rounds = 0
        while calls:
            outcomes = await asyncio.gather(*(self._calls.run_call(c, cut) for c in calls))
            cut = False  # queued calls come from tools, whole
            queued: list[dict[str, Any]] = []
            for outcome in outcomes:
                self._transcript.append(outcome.message, outcome.ref)
                self._apply(outcome.message, outcome.changes, injected, queued)
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
                    run.queued += 1
                    calls.append(
                        {
                            "id": f"queued_{run.step}_{run.queued}",
                            "name": q["name"],
                            "arguments": json.dumps(q.get("args") or {}),
                        }
                    )
                # As if the model had asked: an assistant turn holding the queued calls.
                turn = {"role": "assistant", "content": "", "tool_calls": calls, "queued": True}
                self._transcript.append(turn, {"message": turn})
        for message in injected:
            self._transcript.append(message, {"message": message})

    def _apply(
        self,
        message: Message,
        changes: dict[str, Any] | None,
        injected: list[Message],
        queued: list[dict[str, Any]],
    ) -> None:
        if not changes:
            return
        self._run.state.update(changes.get("state") or {})
        self._run.context.update(changes.get("context") or {})
        for key in changes.get("context_deleted") or []:
            self._run.context.pop(key, None)
        self._run.env.update(changes.get("env") or {})
        for event in changes.get("events") or []:
            self._run.events.append(
                {
                    **event,
                    "tool": message.get("name"),
                    "call_id": message.get("tool_call_id"),
                    "step": self._run.step,
                    "at": workflow.now().isoformat(),
                }
            )
        injected += changes.get("messages") or []
        queued += changes.get("queued") or []
