"""Questions a run asks a person (`ask_human`, `ctx.ask`): read them and answer them.

```python
for q in await toren_client.pending_questions(client, run_id):
    await toren_client.answer(client, run_id, q.question_id, q.choices[0] if q.choices else "yes")
```
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client

from toren.agent._question_types import Answer, PendingQuestion
from toren.client._readable import ensure_readable
from toren.errors import UndecodablePayloadError

__all__ = ["answer", "pending_questions"]


async def answer(
    client: Client, run_id: str, question_id: str, text: str, *, by: str | None = None
) -> Answer:
    """Answer a waiting question through the run's `answer` update; returns the recorded answer.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the question is unknown or answered, the
            text is empty or not one of its choices (the message says which).
        UndecodablePayloadError: the run's payloads are encoded by a codec this client lacks;
            with `accepted` true the answer was recorded and only the reply is unreadable.
    """
    await ensure_readable(client, run_id)
    handle = client.get_workflow_handle(run_id)
    body = {"question_id": question_id, "text": text, "by": by or client.identity}
    try:
        recorded: Answer = await handle.execute_update("answer", body, result_type=Answer)
    except UndecodablePayloadError as err:
        raise UndecodablePayloadError(err.encoding, accepted=True) from None
    return recorded


async def pending_questions(
    client: Client, run_id: str, *, timeout: float | None = None
) -> list[PendingQuestion]:
    """The run's questions waiting for an answer; `timeout`: seconds to wait for a worker."""
    handle = client.get_workflow_handle(run_id)
    found: list[PendingQuestion] = await handle.query(
        "pending_questions",
        result_type=list[PendingQuestion],
        rpc_timeout=timedelta(seconds=timeout) if timeout else None,
    )
    return found
