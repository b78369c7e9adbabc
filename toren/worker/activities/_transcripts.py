"""Reading a run's whole transcript across its chain, and keeping it in the store.

`read_transcript` is how a model or tool activity gets the conversation a worker's cache lacks
(the `transcript_segment` query of each run of the chain, or the transcript a thread kept when
it moved to a new Worker Deployment Version); `keep_transcript` is the activity that keeps it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from toren.agent._transcript import assemble, digest_of
from toren.store._store import StoreError
from toren.store._transcripts import keep_transcript as keep_transcript_in_store
from toren.store._transcripts import kept_transcript, transcript_key

__all__ = ["keep_transcript", "read_transcript"]


async def read_transcript(run_key: str, own: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The whole transcript of the run `run_key` (`<workflow id>/<run id>`).

    Asked of the run and of the runs it continued from. `own`: the run's own part,
    `{"prior", "messages"}`, given by a local call, whose run cannot answer a query while the
    call runs (the runs before it are closed and can).
    """
    workflow_id, _, run_id = run_key.rpartition("/")
    client = activity.client()

    async def segment_of(prior: str | None, start: int) -> dict[str, Any]:
        if prior is None and own is not None:
            messages = list(own.get("messages") or [])
            return {"prior": own.get("prior"), "total": len(messages), "messages": messages[start:]}
        handle = client.get_workflow_handle(workflow_id, run_id=prior or run_id or None)
        segment: dict[str, Any] = await handle.query("transcript_segment", start)
        return segment

    async def kept(key: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(kept_transcript, key)

    return await assemble(segment_of, kept)


@activity.defn(name="toren.keep_transcript")
async def keep_transcript(expected: dict[str, Any]) -> str:
    """Keep this run's whole transcript in the store; return its key.

    A thread calls it on its old version before it moves to a new one, while the old version's
    workers still answer the queries that read the chain (`toren.store._transcripts`).
    `expected` is the workflow's `count` and `digest`: what is kept must be exactly that.
    """
    info = activity.info()
    workflow_id, run_id = info.workflow_id or "", info.workflow_run_id or ""
    messages = await read_transcript(f"{workflow_id}/{run_id}")
    count = int(expected["count"])
    if len(messages) < count or digest_of(messages[:count]) != expected["digest"]:
        raise ApplicationError(
            f"the transcript read back ({len(messages)} messages) is not the run's "
            f"({count} messages, digest {expected['digest'][:12]})",
            type="TranscriptMismatch",
            non_retryable=True,
        )
    key = transcript_key(workflow_id, run_id)
    try:
        await asyncio.to_thread(keep_transcript_in_store, key, messages[:count])
    except StoreError as err:
        # Retryable: the next attempt may find the store back.
        raise ApplicationError(f"keeping the transcript failed: {err}", type="StoreError") from None
    return key
