"""The `toren.call_model` activity: one model call, streamed, billed, retried by Temporal.

The activity gets a reference to the transcript and takes the messages from the worker's cache
(or asks the run for them); it streams the reply's deltas live, heartbeats the usage a budgeted
agent already paid for, and turns a provider's failure into the `ApplicationError` Temporal
retries or not, carrying every earlier attempt's failure (`toren.agent._attempts`).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from toren.agent._attempts import carried, usage_of, with_failure, with_usage
from toren.agent._context_plan import COMPACT_ACTIVITY, SUMMARY_MAX_TOKENS, CompactInput, view
from toren.agent._payload_limits import cut_message, shown_to_model
from toren.agent._tool import Tool
from toren.agent._types import ModelCallInput, ModelCallResult
from toren.errors import PromptTooLongError
from toren.worker._loaded import LoadedAgent
from toren.worker._redact import Redactor
from toren.worker.activities._call_scope import (
    announce_retry,
    failed_in,
    heartbeating,
    live_stream,
)
from toren.worker.activities._compact import SUMMARY_INSTRUCTIONS, conversation_text
from toren.worker.activities._served import Served
from toren.worker.activities._tool_call import run_key_of
from toren.worker.activities._transcripts import read_transcript
from toren.worker.models import ModelHTTPError, ModelReply, ModelRequest
from toren.worker.models._output import ask_for_output

__all__ = ["ModelCalls"]


class ModelCalls(Served):
    """The runtime's model half: `toren.call_model`, and `toren.compact_context` (a summary)."""

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
            async with heartbeating():
                messages = await self._fetch_transcript(run_key, input.count)
        _, _, model_name = input.model.partition("/")
        request = ModelRequest(
            model=model_name,
            system=loaded.agent.instructions,
            # What the model is shown: no tool result past the agent's declared limit.
            messages=shown_to_model(
                _shown(loaded, messages, input.context),
                loaded.agent.config.limits.max_result_bytes_shown,
            ),
            tools=[_declaration(t) for t in loaded.agent.tools.values()],
            max_tokens=loaded.agent.config.max_tokens,
            settings=loaded.agent.config.model_settings.model_dump(exclude_none=True),
            # One prompt-cache key per run or thread, across continue-as-new (its workflow id).
            cache_key=run_key.rpartition("/")[0] or run_key,
        )
        agent = loaded.agent
        request, answered = ask_for_output(
            request, agent.output_schema, agent.output_name, agent.config.output_mode,
            loaded.model.partition("/")[0],
        )  # fmt: skip
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
        live = live_stream(loaded, input.step, redactor, tail_in_result=True)
        with span as call, failed_in(call, redactor):
            async with heartbeating() as beats, live or contextlib.nullcontext():
                if live is not None:
                    request.on_delta = live.delta
                    announce_retry(live, earlier)
                reply = answered(await self._complete(loaded, request, earlier, redactor))
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
        result = _result(message, reply, earlier)
        result.live = live.tail if live is not None and live.tail else None
        return result

    @activity.defn(name=COMPACT_ACTIVITY)
    async def compact_context(self, input: CompactInput) -> ModelCallResult:
        """Ask the model for a summary of the transcript's span `start`..`end`."""
        loaded = self._get(input.agent)
        run_key = run_key_of(input.run_key)
        ref = (input.count, input.digest, input.since, input.tail)
        async with heartbeating():
            # Cached by the worker that ran the run's last step, else asked of the run.
            messages = self.transcripts.resolve(run_key, *ref)
            if messages is None:
                messages = await self._fetch_transcript(run_key, input.count)
            text = conversation_text(
                messages[input.start : input.end], input.previous_summary, input.max_chars
            )
            request = ModelRequest(
                model=input.model.partition("/")[2],
                system=input.instructions or SUMMARY_INSTRUCTIONS,
                messages=[{"role": "user", "content": text}],
                max_tokens=SUMMARY_MAX_TOKENS,
            )
            earlier = carried(activity.info().heartbeat_details)
            redactor = loaded.redactor()
            reply = await self._complete(loaded, request, earlier, redactor)
        return _result(redactor.value(reply.message()), reply, earlier)

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
                # Too long a prompt: the run compacts and calls again (_context_window).
                type=type(err).__name__
                if isinstance(err, PromptTooLongError)
                else "ModelHTTPError",
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


def _result(
    message: dict[str, Any], reply: ModelReply, earlier: list[dict[str, Any]]
) -> ModelCallResult:
    """A model call's result: the (redacted) message, what it cost, and which attempt it was."""
    return ModelCallResult(
        message=message,
        usage=reply.usage,
        model=reply.model,
        finish_reason=reply.finish_reason,
        earlier_usage=usage_of(earlier),
        attempt=activity.info().attempt,
    )


def _shown(
    loaded: LoadedAgent, messages: list[dict[str, Any]], plan: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """What the model is shown of `messages`: the run's compaction plan, or the agent's own.

    The agent's own is its `context.strategy`, a user's function: what it returns is checked,
    and its failure (redacted: it is recorded) is not retried.
    """
    strategy = loaded.agent.context_strategy
    if strategy is None:
        return view(messages, plan)
    try:
        shown = strategy([dict(m) for m in messages])
    except Exception as err:
        raise ApplicationError(
            f"context.strategy of agent {loaded.agent.name!r} raised {type(err).__name__}: {err}",
            type="ContextStrategyFailed",
            non_retryable=True,
        ) from None
    if not isinstance(shown, list) or not all(isinstance(m, dict) for m in shown):
        raise ApplicationError(
            f"context.strategy of agent {loaded.agent.name!r} must return a list of message "
            f"dicts, got {type(shown).__name__}",
            type="ContextStrategyFailed",
            non_retryable=True,
        )
    return shown
