"""The worker-side runtime: loaded agents, their env and providers, and the activities.

```python
runtime = AgentRuntime.load(["examples/support"], environ=os.environ)
worker = Worker(client, task_queue="support", activities=runtime.activities(), ...)
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from toren.agent._attempts import carried, usage_of, with_failure, with_usage
from toren.agent._context_plan import view
from toren.agent._payload_limits import cut_message, shown_to_model
from toren.agent._tool import Tool
from toren.agent._transcript import TranscriptCache, tool_message
from toren.agent._types import (
    AgentSpec,
    ApprovalCheck,
    ApprovalQuestion,
    ModelCallInput,
    ModelCallResult,
    ToolCallInput,
    ToolCallResult,
)
from toren.errors import ConfigError
from toren.worker._agent import Agent, load_agent, process_specs
from toren.worker._live import ActivityStream, current_stream
from toren.worker._loaded import LoadedAgent, worker_secrets
from toren.worker._mcp._pool import McpPool
from toren.worker._prices import prices_for
from toren.worker._redact import MIN_SECRET_CHARS, Redactor
from toren.worker._telemetry import CallSpan, Telemetry
from toren.worker.activities._compact import compact_activity
from toren.worker.activities._tool_call import (
    missing_variables,
    read_transcript,
    run_key_of,
    run_tool_call,
    validation_text,
)
from toren.worker.models import (
    ModelHTTPError,
    ModelProvider,
    ModelReply,
    ModelRequest,
    provider_for,
)
from toren.worker.models._hosted import hosted_tool_problems

__all__ = ["AgentRuntime"]

log = logging.getLogger("toren")

HEARTBEAT_EVERY = 2.0
"""Seconds between heartbeats of a running call (agent.yaml `heartbeatTimeoutS`, 10 s unless
set, is at least 10 s or off; Temporal's SDK sends at most one beat per 0.8 of it)."""


class AgentRuntime:
    """Everything a worker needs to serve some agents: build it with `AgentRuntime.load`."""

    def __init__(self, agents: Sequence[LoadedAgent]) -> None:
        self.agents: dict[str, LoadedAgent] = {a.agent.name: a for a in agents}
        self.transcripts = TranscriptCache()
        self.telemetry = Telemetry()
        """Spans and metrics of model and tool calls; set by the worker when configured."""
        self.search_attributes: list[str] = []
        """toren's search attributes the namespace has; set by the worker at start."""
        self.queues: dict[str, set[str]] = {}
        """Agent → the task queues where a worker registers its tool activities."""
        self.mcp: McpPool | None = None
        """The worker's MCP sessions, once it listed the agents' `mcp_servers`."""

    def serve_on(self, task_queue: str, agents: Sequence[LoadedAgent] | None = None) -> None:
        """Note that a worker on `task_queue` registers `agents`' tools (default: all)."""
        for a in agents or self.agents.values():
            self.queues.setdefault(a.agent.name, set()).add(task_queue)

    @classmethod
    def load(
        cls,
        folders: Sequence[str | Path | Agent],
        environ: Mapping[str, str],
        models: Mapping[str, ModelProvider] | None = None,
        model_override: str | None = None,
    ) -> AgentRuntime:
        """Load agent folders and resolve their env from `environ`.

        Args:
            folders: agent folders (or already loaded agents).
            environ: where env values come from, normally `os.environ`.
            models: providers by model string (`"mock/x"`), overriding the built-in ones.
            model_override: serve every agent with this model instead of its own.

        Raises:
            ConfigError: every problem of every agent, missing env included, in one error.
        """
        problems: list[str] = []
        loaded: list[LoadedAgent] = []
        for folder in folders:
            try:
                agent = folder if isinstance(folder, Agent) else load_agent(folder)
                model = model_override or agent.config.model
                if model_override:
                    agent.config = agent.config.model_copy(update={"model": model})
                # Reported with the agent's other problems (a missing key, say), all at once.
                problems += hosted_tool_problems(agent.name, model, agent.tools.values())
                env = agent.resolve_env(environ)
                for tool in agent.tools.values():
                    absent = missing_variables(tool, environ)
                    if absent:
                        log.warning(
                            "tool %s.%s needs variable(s) %s, missing here: its calls will "
                            "fail until they are set",
                            agent.name,
                            tool.name,
                            ", ".join(absent),
                        )
                provider = (models or {}).get(model) or provider_for(model, env, agent.folder)
                processes = process_specs(agent.config, agent.folder)
                limits = agent.config.limits
                configured = limits.prices
                prices = prices_for(
                    model,
                    {"input": configured.input_per_mtok, "output": configured.output_per_mtok}
                    if configured
                    else None,
                )
                if limits.max_cost_usd is not None and prices is None:
                    problems.append(
                        f"{agent.folder / 'agent.yaml'}: limits.maxCostUSD needs the price of "
                        f"model {model!r}, which the price table does not know: set "
                        "limits.prices: {inputPerMTok: ..., outputPerMTok: ...} (USD per "
                        "million tokens)"
                    )
                ready = LoadedAgent(
                    agent=agent,
                    env=env,
                    provider=provider,
                    model=model,
                    processes=processes,
                    prices=prices,
                )
                _warn_short_secrets(ready, environ)
                loaded.append(ready)
            except ConfigError as err:
                problems += err.problems
        names = [a.agent.name for a in loaded]
        for name in {n for n in names if names.count(n) > 1}:
            problems.append(f"two agent folders are both named {name!r}")
        if problems:
            raise ConfigError(problems)
        held = worker_secrets(loaded, environ)
        for ready in loaded:
            ready.worker_secrets = held
        return cls(loaded)

    def task_queues(self) -> dict[str, list[LoadedAgent]]:
        """Agents grouped by task queue (one Temporal worker serves each queue)."""
        queues: dict[str, list[LoadedAgent]] = {}
        for a in self.agents.values():
            queues.setdefault(a.agent.task_queue, []).append(a)
        return queues

    def activities(self, agents: Sequence[LoadedAgent] | None = None) -> list[Callable[..., Any]]:
        """The activities serving `agents` (default: all): the loop's own and one per tool."""
        served = list(agents or self.agents.values())
        acts: list[Callable[..., Any]] = [self.agent_spec, self.check_approval, self.call_model]
        acts.append(compact_activity(self, _heartbeating))  # issue 39: the summarising call
        for a in served:
            for tool in a.agent.tools.values():
                # The workflow runs native tools; the model's provider runs provider tools.
                if not tool.native and tool.execution_mode == "local":
                    acts.append(self._tool_activity(a, tool))
        if any(a.agent.config.mcp_servers for a in served):
            acts.append(self._late_tool_activity())
        return acts

    def _get(self, agent: str) -> LoadedAgent:
        loaded = self.agents.get(agent)
        if loaded is None:
            served = ", ".join(sorted(self.agents)) or "none"
            raise ApplicationError(
                f"this worker does not serve agent {agent!r} (it serves: {served}); "
                "start a worker for it with `toren worker <folder>`",
                type="UnknownAgent",
                non_retryable=True,
            )
        return loaded

    # -- local activities -----------------------------------------------------------------

    @activity.defn(name="toren.agent_spec")
    async def agent_spec(self, agent: str) -> AgentSpec:
        """Record the agent's spec (schemas and policies) in the run's history.

        Refuses a run on a task queue where no worker of this runtime registers the agent's
        tools: its first tool call would retry "activity not registered" forever.
        """
        loaded = self._get(agent)
        queue = activity.info().task_queue
        served = self.queues.get(agent)
        if served and queue not in served:
            where = ", ".join(repr(q) for q in sorted(served))
            raise ApplicationError(
                f"agent {agent!r} is served on task queue {where}, not {queue!r}: this worker "
                f"runs AgentRun on {queue!r} but registers {agent!r}'s tools only there; start "
                f"the run with task_queue={sorted(served)[0]!r} (toren run and "
                "toren.client.start_run take it from agent.yaml), or serve the agent on "
                f"{queue!r} too",
                type="WrongTaskQueue",
                non_retryable=True,
            )
        if self.mcp is not None:
            await self.mcp.refresh(agent)
        return loaded.spec(self.search_attributes)

    @activity.defn(name="toren.check_approval")
    async def check_approval(self, question: ApprovalQuestion) -> ApprovalCheck:
        """Evaluate a tool's approval policy on the call's args (recorded in history)."""
        agent, tool, call_id, args = question.agent, question.tool, question.call_id, question.args
        loaded = self._get(agent)
        t = loaded.agent.tools[tool]
        check = ApprovalCheck(gated=True, call_id=call_id, tool=tool)
        if t.approval_kind == "always":
            check.reason = "approval: always"
            self.telemetry.approval_requested(agent, tool)
            return check
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
            self.telemetry.approval_requested(agent, tool)
        return check

    # -- the model ---------------------------------------------------------------------------

    @activity.defn(name="toren.call_model")
    async def call_model(self, input: ModelCallInput) -> ModelCallResult:
        """Call the agent's model with the run's transcript."""
        loaded = self._get(input.agent)
        run_key = run_key_of(input.run_key)
        messages = self.transcripts.resolve(
            run_key, input.count, input.digest, input.since, input.tail
        )
        if messages is None:
            # Asking a run that continued as new replays its history on a worker: it can take
            # longer than the heartbeat timeout.
            async with _heartbeating():
                messages = await self._fetch_transcript(run_key, input.count)
        _, _, model_name = input.model.partition("/")
        request = ModelRequest(
            model=model_name,
            system=loaded.agent.instructions,
            # What the model is shown: no tool result past the agent's declared limit.
            messages=shown_to_model(
                view(messages, input.context),  # issue 39: the compaction plan
                loaded.agent.config.limits.max_result_bytes_shown,
            ),
            tools=[_declaration(t) for t in loaded.agent.tools.values()],
            max_tokens=loaded.agent.config.max_tokens,
            settings=loaded.agent.config.model_settings.model_dump(exclude_none=True),
        )
        info = activity.info()
        # The failures of this call's earlier attempts, so history keeps every one (_attempts).
        earlier = carried(info.heartbeat_details)
        redactor = loaded.redactor()
        limits = loaded.agent.config.limits
        budgeted = limits.max_tokens is not None or limits.max_cost_usd is not None
        span = self.telemetry.model_call(
            loaded.agent.name,
            input.model,
            run_key.rpartition("/")[0],
            input.step,
            info.attempt,
            request.max_tokens,
        )
        live = _live_stream(loaded, input.step, redactor, tail_in_result=True)
        with span as call, _failed_in(call, redactor):
            async with _heartbeating() as beats, live or contextlib.nullcontext():
                if live is not None:
                    request.on_delta = live.delta
                    _announce_retry(live, earlier)
                reply = await self._complete(loaded, request, earlier, redactor)
                if live is not None:
                    live.calls_done()
                if budgeted and reply.usage:
                    # Paid for now: if this attempt dies before its result is recorded, the
                    # next one still counts these tokens (one heartbeat, budgeted agents only).
                    beats[:] = [with_usage(earlier, info.attempt, reply.usage)]
                    activity.heartbeat(*beats)
            call.usage(reply.usage, reply.finish_reason)
            call.content("gen_ai.output.text", reply.content, redactor)
        # A model may repeat a secret it was given (in a prompt, say): its reply is redacted too.
        message = cut_message(redactor.value(reply.message()))
        self.transcripts.store(run_key, [*messages, message])
        return ModelCallResult(
            message=message,
            usage=reply.usage,
            model=reply.model,
            finish_reason=reply.finish_reason,
            earlier_usage=usage_of(earlier),
            attempt=info.attempt,
            live=live.tail if live is not None and live.tail else None,
        )

    async def _complete(
        self,
        loaded: LoadedAgent,
        request: ModelRequest,
        earlier: list[dict[str, Any]],
        redactor: Redactor,
    ) -> ModelReply:
        """The provider's reply; its failure as the `ApplicationError` Temporal retries (or not)."""
        info = activity.info()
        try:
            return await loaded.provider.complete(request)
        except ModelHTTPError as err:
            text = redactor.text(str(err))
            failed = with_failure(earlier, info.attempt, err.status, text)
            activity.heartbeat(failed)
            raise ApplicationError(
                text,
                failed,
                type="ModelHTTPError",
                non_retryable=not err.retryable,
                next_retry_delay=(timedelta(seconds=err.retry_after) if err.retry_after else None),
            ) from None
        except asyncio.CancelledError:
            raise
        except ApplicationError as err:
            raise redactor.failure(err) from None
        except Exception as err:
            # Not an HTTP failure (those are ModelHTTPError): a bug in a provider or a
            # scripted step; retrying would only repeat it. No cause: Temporal would record
            # its text unredacted.
            text = redactor.text(f"{type(err).__name__}: {err}")
            raise ApplicationError(
                text,
                with_failure(earlier, info.attempt, None, text),
                type="ModelProviderError",
                non_retryable=True,
            ) from None

    async def _fetch_transcript(self, run_key: str, count: int) -> list[dict[str, Any]]:
        return (await read_transcript(run_key))[:count]

    # -- tools -----------------------------------------------------------------------------

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
            live = _live_stream(loaded, input.step, redactor, call_id=input.call_id)
            with span as call, _failed_in(call, redactor):
                async with _heartbeating(), live or contextlib.nullcontext():
                    token = current_stream.set(live)
                    try:
                        if live is not None:
                            _announce_retry(live, [])
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


@contextlib.contextmanager
def _failed_in(call: CallSpan, redactor: Redactor) -> Iterator[None]:
    """Mark `call`'s span failed, with a redacted message, when the attempt raises."""
    try:
        yield
    except BaseException as err:
        call.failed(f"{type(err).__name__}: {err}", redactor)
        raise


def _live_stream(
    loaded: LoadedAgent,
    step: int,
    redactor: Redactor,
    call_id: str | None = None,
    tail_in_result: bool = False,
) -> ActivityStream | None:
    """The run's live stream for this activity, or `None` (agent.yaml `stream: false`)."""
    config = loaded.agent.config.stream
    if not config.enabled or activity.info().is_local:
        return None
    progress = {
        str(t.name): t.progress_argument for t in loaded.agent.tools.values() if t.progress_argument
    }
    return ActivityStream(
        step=step,
        redactor=redactor,
        batch_ms=config.batch_ms,
        call_id=call_id,
        progress_arguments=progress,
        tail_in_result=tail_in_result,
    )


def _announce_retry(live: ActivityStream, earlier: list[dict[str, Any]]) -> None:
    """As a retry starts: what the earlier attempts published is superseded, and why."""
    info = activity.info()
    for attempt in range(1, info.attempt):
        live.publish({**live.base("superseded"), "attempt": attempt})
    if info.attempt <= 1 or live.call_id is not None:
        return
    last = earlier[-1] if earlier else {}
    delay = None
    if last.get("at"):
        with contextlib.suppress(ValueError):
            failed_at = datetime.fromisoformat(str(last["at"]).replace("Z", "+00:00"))
            delay = round((info.current_attempt_scheduled_time - failed_at).total_seconds(), 3)
    policy = info.retry_policy
    live.publish(
        {
            **live.base("model_retry"),
            "max_attempts": policy.maximum_attempts if policy else None,
            "reason": str(last.get("error") or "the worker running it stopped"),
            "status": last.get("status"),
            "delay_s": delay,
        }
    )


def _declaration(tool: Tool) -> dict[str, Any]:
    """What a model request says of `tool` (`ModelRequest.tools`)."""
    declared: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.schema,
    }
    if tool.execution_mode == "provider":
        declared["provider"] = tool.execution_provider
        declared["provider_options"] = tool.provider_options
    return declared


def _warn_short_secrets(loaded: LoadedAgent, environ: Mapping[str, str]) -> None:
    declared = set(loaded.agent.required_env()) | {
        v.name for t in loaded.agent.tools.values() for v in t.variables if v.type == "secret"
    }
    short = sorted(
        n
        for n, value in loaded.secrets(environ).items()
        if n in declared and len(value) < MIN_SECRET_CHARS
    )
    if short:
        log.warning(
            "agent %s: %s %s shorter than %d characters, too short to redact: it may appear "
            "in history",
            loaded.agent.name,
            ", ".join(short),
            "is" if len(short) == 1 else "are",
            MIN_SECRET_CHARS,
        )


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[list[Any]]:
    """Heartbeat in the background, so a dead worker is noticed and cancellation arrives.

    Each beat carries the details this attempt started with, so what an earlier attempt left
    there (a model call's failed attempts, `toren.agent._attempts`) outlives a worker that dies.
    """
    details = list(activity.info().heartbeat_details)
    if activity.info().is_local:
        # Local activities cannot heartbeat (the SDK core logs a warning for each attempt).
        yield details
        return

    async def beat() -> None:
        while True:
            # Beat after the first interval, not at once: each beat is a server RPC, most calls
            # end sooner, and a heartbeat timeout (at least 10 s) leaves room for the first one.
            await asyncio.sleep(HEARTBEAT_EVERY)
            activity.heartbeat(*details)

    task = asyncio.create_task(beat())
    try:
        yield details  # the caller may replace what later beats carry
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
