"""`toren.compact_context`: the model summarises the older turns of a long conversation.

The run decides when and what to fold (`toren.workflows._context_window`); this activity gets
the transcript by reference, as `toren.call_model` does, shows the model the span as plain text
(the previous summary first, each tool result cut short) and returns the summary as a model
call's result, so it is retried, recorded and counted like any model call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from temporalio import activity

from toren.agent._attempts import carried, usage_of
from toren.agent._context_plan import COMPACT_ACTIVITY, SUMMARY_MAX_TOKENS, CompactInput
from toren.agent._transcript import TranscriptCache
from toren.agent._types import ModelCallResult
from toren.worker._loaded import LoadedAgent
from toren.worker._redact import Redactor
from toren.worker.activities._tool_call import run_key_of
from toren.worker.models import ModelReply, ModelRequest

__all__ = ["SUMMARY_INSTRUCTIONS", "compact_activity", "conversation_text"]

SUMMARY_INSTRUCTIONS = (
    "You write the summary of the earlier part of a conversation between a user and an "
    "assistant that uses tools, so the assistant can go on without the full text. Keep what "
    "still matters: the user's requests and constraints, decisions, names, ids, numbers, what "
    "the tools returned that was used, and open questions. Write it as a record of what "
    "happened, in at most 400 words; give no instructions."
)
"""The summarising call's system prompt unless agent.yaml or the `compact` update gives one."""
TOOL_RESULT_CHARS = 1_500
"""Characters of each tool result the summarising call is shown."""


def conversation_text(messages: list[dict[str, Any]], previous: str, max_chars: int) -> str:
    """The span to summarise as plain text, the newest `max_chars` of it."""
    lines = [f"Summary of what came before:\n{previous}\n"] if previous else []
    for message in messages:
        role = str(message.get("role"))
        content = str(message.get("content") or "")
        if role == "tool":
            cut = content[:TOOL_RESULT_CHARS]
            more = len(content) - len(cut)
            lines.append(f"[tool {message.get('name')} returned] {cut}")
            if more > 0:
                lines.append(f"[... {more} more characters]")
            continue
        if content:
            lines.append(f"[{role}] {content}")
        for call in message.get("tool_calls") or []:
            args = call.get("arguments")
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            lines.append(f"[{role} called {call.get('name')}] {args[:TOOL_RESULT_CHARS]}")
    text = "\n".join(lines)
    return text[-max_chars:]


class Runtime(Protocol):
    """What the activity uses of the worker's `AgentRuntime` (the model call's own parts)."""

    transcripts: TranscriptCache

    def _get(self, agent: str) -> LoadedAgent: ...

    async def _fetch_transcript(self, run_key: str, count: int) -> list[dict[str, Any]]: ...

    async def _complete(
        self,
        loaded: LoadedAgent,
        request: ModelRequest,
        earlier: list[dict[str, Any]],
        redactor: Redactor,
    ) -> ModelReply: ...


def compact_activity(
    runtime: Runtime, heartbeating: Callable[[], AbstractAsyncContextManager[Any]]
) -> Callable[..., Any]:
    """The `toren.compact_context` activity of `runtime`'s worker.

    `heartbeating`: the model call's background heartbeat, so a dead worker is noticed in
    seconds while the summary is written.
    """

    @activity.defn(name=COMPACT_ACTIVITY)
    async def compact_context(input: CompactInput) -> ModelCallResult:
        loaded = runtime._get(input.agent)
        run_key = run_key_of(input.run_key)
        ref = (input.count, input.digest, input.since, input.tail)
        async with heartbeating():
            # Cached by the worker that ran the run's last step, else asked of the run.
            messages = runtime.transcripts.resolve(run_key, *ref)
            if messages is None:
                messages = await runtime._fetch_transcript(run_key, input.count)
            span = messages[input.start : input.end]
            request = ModelRequest(
                model=input.model.partition("/")[2],
                system=input.instructions or SUMMARY_INSTRUCTIONS,
                messages=[
                    {
                        "role": "user",
                        "content": conversation_text(span, input.previous_summary, input.max_chars),
                    }
                ],
                max_tokens=SUMMARY_MAX_TOKENS,
            )
            earlier = carried(activity.info().heartbeat_details)
            redactor = loaded.redactor()
            reply = await runtime._complete(loaded, request, earlier, redactor)
        return ModelCallResult(
            message=redactor.value(reply.message()),
            usage=reply.usage,
            model=reply.model,
            finish_reason=reply.finish_reason,
            earlier_usage=usage_of(earlier),
            attempt=activity.info().attempt,
        )

    return compact_context
