"""Threads from Python: start one, send it messages, page through it, close it.

```python
from toren import client as toren_client

thread = await toren_client.start_thread(client, "support", user_id="alice")
answer = await toren_client.send_message(client, thread.id, "Where is order A-1002?")
print(answer["text"])
answer = await toren_client.send_message(client, thread.id, "And A-1001?")
for message in await toren_client.messages(client, thread.id):
    print(message["role"], message.get("content"))
await toren_client.close_thread(client, thread.id, by="alice")
```

Without toren: start the workflow `AgentThread` with `{"agent": ..., "user_id": ...}` on the
agent's task queue, then execute its update `send_message` with `{"content": ...}` (or send
the signal of that name to queue a message without waiting).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from toren.agent._types import ThreadInput, ThreadResult
from toren.client._output import typed_outcome
from toren.client._readable import ensure_readable
from toren.connect import _search_attributes as search_attributes
from toren.errors import RunError, UndecodablePayloadError, UsageError
from toren.store._transcripts import kept_transcript

__all__ = ["close_thread", "messages", "running_thread", "send_message", "start_thread"]

MAX_CONTINUED = 100
"""How many runs of a thread `send_message` follows while one execution goes on."""


async def start_thread(
    client: Client,
    agent: str,
    *,
    thread_id: str | None = None,
    user_id: str | None = None,
    arguments: dict[str, Any] | None = None,
    task_queue: str | None = None,
) -> WorkflowHandle[Any, ThreadResult]:
    """Start an `AgentThread`; its workflow id is `thread_id` or `<agent>-thread-<random>`.

    Raises:
        UsageError: `thread_id` or `user_id` is not an identifier.
    """
    from toren.workflows._input import identifier_problem

    for what, value in (("thread_id", thread_id), ("user_id", user_id)):
        if value is not None and (problem := identifier_problem(what, value)):
            raise UsageError(problem)
    return await client.start_workflow(
        "AgentThread",
        ThreadInput(agent=agent, user_id=user_id, arguments=arguments),
        id=thread_id or f"{agent}-thread-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue or agent,
        result_type=ThreadResult,
        search_attributes=await search_attributes.start_attributes(client, agent),
        static_summary=f"{agent}: thread" + (f" of {user_id}" if user_id else ""),
        static_details=(
            f"**agent** `{agent}` · a thread started with `toren.client`\n\n"
            'Send a message: **More Actions → Send a Signal** `send_message` with `{"content": '
            '"..."}`. Approvals show up under **Current Details**.'
        ),
    )


async def running_thread(client: Client, thread_id: str) -> bool:
    """Whether `thread_id` is a running thread to take up; `False` when the server has none.

    Raises:
        UsageError: `thread_id` is another kind of workflow, or a thread that has closed.
    """
    try:
        description = await client.get_workflow_handle(thread_id).describe()
    except RPCError:
        return False
    if description.workflow_type != "AgentThread":
        raise UsageError(f"{thread_id!r} is a {description.workflow_type}, not a thread")
    if description.status != WorkflowExecutionStatus.RUNNING:
        status = description.status.name.lower() if description.status else "closed"
        raise UsageError(f"thread {thread_id!r} is {status}; start a new one (leave out --thread)")
    return True


async def send_message(
    client: Client,
    thread_id: str,
    content: str,
    *,
    attachments: list[str] | None = None,
    message_id: str | None = None,
    wait: bool = True,
    output_type: type[Any] | None = None,
) -> dict[str, Any]:
    """Send a message and return its execution's outcome (`text`, `steps`, `usage`, ...).

    An agent with a typed output (`output:`) adds `output`, the parsed answer: an instance of
    `output_type` when given (a pydantic model class, `toren.client._output`).

    `message_id` makes a retry safe: a message id the thread has seen is not run twice (the
    same id is the update id). With `wait=False` the message is queued by signal and this
    returns `{"message_id": ..., "status": "queued"}` at once.

    Raises:
        RunError: the execution failed (a budget, a model that kept failing); `kind` says which.
        temporalio.client.WorkflowUpdateFailedError: the message was refused (empty, or the
            thread is closed).
    """
    message_id = message_id or f"msg-{uuid.uuid4().hex[:12]}"
    request: dict[str, Any] = {"content": content}
    if attachments:
        request["attachments"] = attachments
    await ensure_readable(client, thread_id)
    handle = client.get_workflow_handle(thread_id)
    if not wait:
        await handle.signal("send_message", {**request, "id": message_id})
        return {"message_id": message_id, "status": "queued"}
    outcome = await _update(handle, "send_message", request, message_id)
    for _ in range(MAX_CONTINUED):
        if not outcome.get("continued"):
            return typed_outcome(outcome, output_type)
        # The thread continued as new mid-execution: the latest run has the message.
        outcome = await _update(
            client.get_workflow_handle(thread_id), "wait_result", message_id, None
        )
    raise RunError(f"message {message_id} still running after {MAX_CONTINUED} continue-as-new")


async def _update(
    handle: WorkflowHandle[Any, Any], name: str, arg: Any, update_id: str | None
) -> dict[str, Any]:
    try:
        outcome: dict[str, Any] = await handle.execute_update(name, arg, id=update_id)
    except UndecodablePayloadError as err:
        # The thread took the message; only its answer is unreadable here.
        raise UndecodablePayloadError(err.encoding, accepted=True) from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            # The workflow has closed (or is closing): the server refuses the update.
            raise RunError(
                f"thread {handle.id!r} is closed or does not exist ({err.message}); start a new "
                "one with start_thread",
                kind="ThreadClosed",
            ) from None
        raise
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        details = cause.details if isinstance(cause, ApplicationError) else ()
        if details and isinstance(details[0], dict) and "message_id" in details[0]:
            # The message ran and its execution failed (a refused message has no outcome).
            assert isinstance(cause, ApplicationError)
            raise RunError(cause.message, kind=cause.type or "RunError") from None
        raise
    return outcome


async def messages(
    client: Client, thread_id: str, start: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    """The conversation from index `start` (at most `limit` messages), across continue-as-new."""
    latest = client.get_workflow_handle(thread_id)
    found: list[dict[str, Any]] = []
    handle = latest
    index = start
    while limit is None or len(found) < limit:
        page: dict[str, Any] = await handle.query(
            "messages", args=[index, 100 if limit is None else min(100, limit - len(found))]
        )
        stored = page.get("earlier_stored")
        if stored:
            # Older than this run holds, and kept in the store when the thread moved to a new
            # version (whose workers cannot answer for the old runs).
            kept = await asyncio.to_thread(kept_transcript, str(stored))
            older = kept[index:] if limit is None else kept[index:][: limit - len(found)]
            found += older
            index += len(older)
            handle = latest
            if not older:
                break
            continue
        if page["earlier_run_id"]:
            # Older than this run holds: the run it continued from does.
            handle = client.get_workflow_handle(thread_id, run_id=page["earlier_run_id"])
            continue
        if not page["messages"]:
            if handle is latest:
                break
            handle = latest  # that run's part is read; the newer runs hold the rest
            continue
        found += page["messages"]
        index += len(page["messages"])
        if index >= page["total"]:
            if handle is latest:
                break
            handle = latest
    return found


async def close_thread(
    client: Client, thread_id: str, *, by: str | None = None, wait: bool = True
) -> ThreadResult | None:
    """Close a thread once its running execution ends; with `wait`, return its result."""
    await ensure_readable(client, thread_id)
    handle = client.get_workflow_handle(thread_id, result_type=ThreadResult)
    await handle.signal("close", {"by": by or client.identity})
    return await handle.result() if wait else None
