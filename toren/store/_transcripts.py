"""Transcripts kept in the store, so a thread's earlier turns outlive the version that ran them.

A chain's earlier messages are normally read back by querying the runs that held them
(`toren.agent._transcript.assemble`): Temporal answers a query of a closed run by replaying it
on a worker of that run's version. A thread that moves to a new Worker Deployment Version
(`toren.workflows._agent_thread`) first keeps its whole transcript here, and its next run names
the object instead of the old run, so once the old version's workers stop nothing needs them.

```
transcripts/<workflow id>/<run id>.json     the messages up to that run's end, as a JSON list
```

Written once, never changed; kept for as long as the thread may be read (`toren store prune`
leaves `transcripts/` alone: delete a closed thread's folder when its history is gone too).
"""

from __future__ import annotations

import json
from typing import Any

from toren.store._objects import Store
from toren.store._store import open_store

__all__ = ["keep_transcript", "kept_transcript", "transcript_key"]

PREFIX = "transcripts"


def transcript_key(workflow_id: str, run_id: str) -> str:
    """Where the transcript of `workflow_id`'s run `run_id` is kept."""
    return f"{PREFIX}/{workflow_id}/{run_id}.json"


def keep_transcript(key: str, messages: list[dict[str, Any]], store: Store | None = None) -> None:
    """Write `messages` under `key` (whole: a reader sees all of it or nothing)."""
    data = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()
    (store or open_store()).put_bytes(key, data)


def kept_transcript(key: str, store: Store | None = None) -> list[dict[str, Any]]:
    """The messages kept under `key`.

    Raises:
        StoreMissing: nothing is kept there (another store, or deleted).
    """
    messages: list[dict[str, Any]] = json.loads((store or open_store()).get_bytes(key))
    return messages
