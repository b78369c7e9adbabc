"""A run's Temporal history rendered as Toren's event log.

```python
history = await client.get_workflow_handle(run_id).fetch_history()
for event in render(history):
    print(event["type"], event)
```

Event types: RunStarted (ThreadStarted for a thread, then MessageReceived and MessageAnswered
per message, ThreadCloseRequested, ThreadClosed), AgentLoaded (each run of a chain: the agent
definition it recorded, its `digest`, and the Worker Deployment `version` it ran on when the
worker is versioned), LlmCallStarted, LlmCallCompleted,
LlmCallFailed (one per failed attempt, from the records `toren.agent._attempts` describes),
ToolCallStarted (for a local tool call, dated when it started, not when its marker was written;
for a tool the model's provider ran, with `provider`, right after the LlmCallCompleted whose
reply carried it), ToolCallCompleted (with attachments by name and id), ToolCallFailed,
ApprovalRequested, ApprovalResolved, SignalRefused, QuestionAsked and QuestionAnswered (a
person asked by `ask_human` or `ctx.ask`), and what tools did through their context:
ToolInvoked, StateSet, ToolEvent, ToolQueued, MessageInjected; OutputRejected (a final answer
that did not match the agent's `output:` and went back to the model); ToolCallAsText (a final
answer that was only a tool call written as text: `sentBack` when it went back to the model as a
correction, false when the run or message ended with it); EvalAnswered in an eval run
(how it answered a call: from the record, diverged, would ask a person); then Receipt (model calls,
failed attempts, tokens, cost) and RunCompleted or RunFailed (also RunTimedOut, RunCanceled,
RunTerminated, RunContinuedAsNew);
WorkflowTaskFailed when a worker could not run the workflow's code. Nothing here is stored twice:
the log is derived from the history, which stays the one source of truth. Payloads an offloading
store holds are read first with `read_through`.

This module reads the history and hands each event to its family: the run and its model calls
(`_render_run`), tool calls (`_render_tools`), approvals (`_render_approvals`) and a thread's
messages (`_render_threads`), over the state they share (`_render_core`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, PayloadConverter
from temporalio.converter import default as default_converter

from toren.agent._context_plan import COMPACT_ACTIVITY
from toren.agent._sdk_private import transform_inbound_payload
from toren.client._render_approvals import ApprovalEvents
from toren.client._render_core import Event, failure_text, tool_of
from toren.client._render_questions import QuestionEvents
from toren.client._render_run import MODEL_ACTIVITY, RunEvents
from toren.client._render_threads import ThreadEvents
from toren.client._render_tools import ToolEvents
from toren.errors import CodecServerError
from toren.workflows._agent_tools import CHILD_APPROVAL_SIGNAL
from toren.workflows._output import OUTPUT_REJECTED
from toren.workflows._text_calls import TOOL_CALL_AS_TEXT
from toren.workflows._thread_inbox import THREAD_SIGNALS

STREAM_PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The signal that carries a batch of live output (`temporalio.contrib.workflow_streams`)."""

__all__ = ["Event", "EventStream", "format_event", "payloads_in", "read_through", "render"]


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every `Payload` inside a history event, however deep.

    Inputs, results, failures and their details, marker details, heartbeat details.
    """
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if isinstance(value, Message):
            items: Iterable[Any] = [value]
        elif hasattr(value, "items"):  # a map field
            items = value.values()
        else:  # a repeated field
            items = value
        for item in items:
            if isinstance(item, Payload):
                yield item
            elif isinstance(item, Message):
                yield from payloads_in(item)


async def read_through(events: Iterable[HistoryEvent], converter: DataConverter) -> None:
    """Replace, in place, each payload of `events` by what it stands for.

    That is the payload store's copy of an offloaded one, decoded by the converter's codec.

    `render` decodes payloads itself without I/O; this is the I/O it needs first, done with the
    client's converter, so a run whose results went to the store renders whole.
    """
    for event in events:
        for payload in list(payloads_in(event)):
            try:
                # The SDK's own inbound step (reference → store → codec); it has no public
                # per-payload form that keeps the payload (`decode` returns values).
                payload.CopyFrom(await transform_inbound_payload(converter, payload))
            except CodecServerError:
                raise  # the codec server the settings name is down or refused: say so
            except Exception:  # unreadable here (no store, a missing key): render says so
                continue


class _Renderer(RunEvents, ToolEvents, ApprovalEvents, ThreadEvents, QuestionEvents):
    """Reads a history in order and hands each event to the family it belongs to."""

    def handle(self, event: HistoryEvent) -> None:
        """Render one history event (most produce no log event, or one)."""
        t = event.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            self._run_started(event)
        elif t == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            self._task_completed(event)
        elif t == EventType.EVENT_TYPE_MARKER_RECORDED:
            self._marker(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self._scheduled(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            self._model_started(event)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            info = self.scheduled.get(done.scheduled_event_id)
            self._completed(event, info, self._first(done.result))
        elif t in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            if t == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                failed = event.activity_task_failed_event_attributes
                scheduled_id, failure = failed.scheduled_event_id, failed.failure
            else:
                timed_out = event.activity_task_timed_out_event_attributes
                scheduled_id, failure = timed_out.scheduled_event_id, timed_out.failure
            self._failed(event, self.scheduled.get(scheduled_id), failure)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signaled = event.workflow_execution_signaled_event_attributes
            values = self._decode(signaled.input)
            self._signal(event, signaled.signal_name, values, signaled.identity)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "send_message":
                body = self._first(request.input.args)
                self._message(event, body, request.meta.update_id, "update")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            update = event.workflow_execution_update_completed_event_attributes
            if update.outcome.HasField("success"):
                outcome = self._first(update.outcome.success)
                if isinstance(outcome, dict) and "approved" in outcome:
                    self._resolved(event, outcome)
                elif isinstance(outcome, dict) and "question_id" in outcome:
                    self._question_answered(event, outcome, "update")
                elif isinstance(outcome, dict) and "message_id" in outcome:
                    self._answered(event, outcome)
            elif update.outcome.HasField("failure"):
                details = update.outcome.failure.application_failure_info.details
                outcome = self._first(details)
                if isinstance(outcome, dict) and "message_id" in outcome:
                    self._answered(event, outcome)
        else:
            self._lifecycle(event)

    def _marker(self, event: HistoryEvent) -> None:
        a = event.marker_recorded_event_attributes
        if a.marker_name != "core_local_activity":
            return
        meta = self._first(a.details["data"]) if "data" in a.details else None
        result = self._first(a.details["result"]) if "result" in a.details else None
        kind = meta.get("activity_type") if isinstance(meta, dict) else None
        tool = tool_of(kind) if kind else None
        if kind == "toren.agent_spec" and isinstance(result, dict):
            self.effects = {t["name"]: t.get("effects", "") for t in result.get("tools", [])}
            self.schemas = {t["name"]: t.get("schema") or {} for t in result.get("tools", [])}
            self.prices = result.get("prices")
            self.typed = bool(result.get("output_schema"))
            self._agent_loaded(event, result)
        elif tool is not None:
            self._local_tool(event, tool, result, a)
        elif kind == "toren.check_approval":
            self._approval_requested(event, result)

    def _scheduled(self, event: HistoryEvent) -> None:
        a = event.activity_task_scheduled_event_attributes
        name = a.activity_type.name
        body = self._first(a.input)
        body = body if isinstance(body, dict) else {}
        info = {"name": name, **body}
        self.scheduled[event.event_id] = info
        tool = tool_of(name)
        if name == MODEL_ACTIVITY:
            # Results the workflow wrote itself (refused arguments, denials) reach history
            # only as this call's input.
            for item in body.get("tail", []):
                message = item.get("message") if isinstance(item, dict) else None
                if isinstance(message, dict) and isinstance(message.get(OUTPUT_REJECTED), dict):
                    # A final answer the workflow sent back (`toren.workflows._output`).
                    self.emit(event, "OutputRejected", **message[OUTPUT_REJECTED])
                if isinstance(message, dict) and isinstance(message.get(TOOL_CALL_AS_TEXT), dict):
                    # A tool call written as text, sent back (`toren.workflows._text_calls`).
                    self.emit(event, "ToolCallAsText", **message[TOOL_CALL_AS_TEXT], sentBack=True)
                if isinstance(message, dict) and message.get("role") == "tool":
                    if self.inherited:  # a fork's: the transcript it starts from
                        self.inherited -= 1
                        continue
                    self._denied_in_workflow(event, message)
                    self._tool_result(event, message)
            self.inherited = 0  # only the first call can bring them
            self._model_scheduled(event, info)
        elif tool is not None:
            self._tool_scheduled(event, tool, body)

    def _completed(self, event: HistoryEvent, info: dict[str, Any] | None, result: Any) -> None:
        if info is None or not isinstance(result, dict):
            return
        tool = tool_of(info["name"])
        if info["name"] == MODEL_ACTIVITY:
            self._model_completed(event, info, result)
            self._asks_in_reply(event, result)
        elif info["name"] == COMPACT_ACTIVITY:  # a summary is a paid model call
            self._count(result.get("usage") or {}, result.get("earlier_usage") or {})
        elif tool is not None and isinstance(result.get("ask"), dict):  # stopped at `ctx.ask`
            self._asked_by_handler(event, tool, info, result)
        elif tool is not None:
            self._tool_completed(event, tool, info, result)

    def _failed(self, event: HistoryEvent, info: dict[str, Any] | None, failure: Any) -> None:
        if info is None:
            return
        tool = tool_of(info["name"])
        if info["name"] == MODEL_ACTIVITY:
            self._model_failed(event, info, failure_text(failure), failure)
        elif tool is not None:
            self._tool_failed(event, tool, info, failure_text(failure))

    def _signal(self, event: HistoryEvent, name: str, values: list[Any], identity: str) -> None:
        if name == STREAM_PUBLISH_SIGNAL:
            return  # live output (`toren.worker._live`), not an event of the run
        if name == CHILD_APPROVAL_SIGNAL:
            return  # a child's call waiting or decided: the child's own (nested) log has it
        if name in THREAD_SIGNALS and self.thread:
            self._thread_signal(event, name, values, identity)
        elif name == "answer":
            self._answer_signal(event, values, identity)
        else:
            self._approval_signal(event, name, values, identity)


class EventStream:
    """Renders history events one at a time, for following a live run."""

    def __init__(self, converter: DataConverter | None = None) -> None:
        self._converter = converter or default_converter()
        self._renderer = _Renderer(self._converter.payload_converter)

    async def feed(self, event: HistoryEvent) -> list[Event]:
        """Take one history event; return the log events it produced (often none)."""
        await read_through([event], self._converter)
        before = len(self._renderer.events)
        self._renderer.handle(event)
        return self._renderer.events[before:]


def render(
    history: WorkflowHistory | Iterable[HistoryEvent], converter: PayloadConverter | None = None
) -> list[Event]:
    """Render a run's history (one run, or several runs of a chain in order) as events.

    Offloaded payloads must be read first (`read_through`); `converter` is the client's
    payload converter (default: Temporal's).
    """
    renderer = _Renderer(converter)
    events: Sequence[HistoryEvent] | Iterable[HistoryEvent] = (
        history.events if isinstance(history, WorkflowHistory) else history
    )
    for event in events:
        renderer.handle(event)
    return renderer.events


def format_event(event: Event) -> str:
    """One line for a terminal: time, type, and the fields that matter."""
    at = str(event.get("at", ""))[11:23]
    hidden = ("type", "at", "depth", "parentRun")
    fields = {k: v for k, v in event.items() if k not in hidden and v not in (None, "")}
    parts = []
    for key, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > 200:
            text = text[:197] + "…"
        parts.append(
            f"{key}={text}"
            if isinstance(value, str) and " " not in text
            else f"{key}={json.dumps(text) if isinstance(value, str) else text}"
        )
    indent = "  │ " * int(event.get("depth") or 0)  # a child run's event (`_nested`)
    return f"{at}  {indent}{event['type']:<18} " + " ".join(parts)
