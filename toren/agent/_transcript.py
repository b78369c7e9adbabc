"""The transcript reference: how `call_model` gets the conversation without it entering history.

The workflow keeps the transcript (append-only) and a chained digest over it. It passes
`call_model` only a reference: run, message count, digest, and the few messages only it knows
(a run's own input among them when it is small, `INLINE_INPUT_BYTES`).
Each worker keeps a cache of transcripts, fed by its own `call_model` results and tool results;
on a miss (another worker ran the previous step, or this worker restarted) the activity asks the
workflow with the `transcript` query. So each message is in history once, as the result of the
activity that produced it (a small input twice: the run's and its first call's), and history
grows linearly with the conversation.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EMPTY_DIGEST",
    "INLINE_INPUT_BYTES",
    "SEGMENT_PAGE_BYTES",
    "TranscriptCache",
    "TranscriptRef",
    "assemble",
    "chain",
    "digest_of",
    "page_of",
    "tool_message",
]

Message = dict[str, Any]

EMPTY_DIGEST = hashlib.sha256(b"toren-transcript").hexdigest()


def chain(digest: str, message: Message) -> str:
    """The digest of a transcript after appending `message` to one whose digest is `digest`."""
    data = json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256((digest + data).encode()).hexdigest()


def digest_of(messages: list[Message]) -> str:
    """The chained digest of a whole transcript."""
    digest = EMPTY_DIGEST
    for message in messages:
        digest = chain(digest, message)
    return digest


def tool_message(call_id: str, tool: str, content: str, is_error: bool) -> Message:
    """The transcript message for a tool's result (built the same way on both sides)."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "name": tool,
        "content": content,
        "is_error": is_error,
    }


def _chain_key(run_key: str) -> str:
    """The cache key of a run: its workflow id, shared by every run of a chain.

    The digest tells a different chain under a reused id apart.
    """
    return run_key.rpartition("/")[0] or run_key


@dataclass
class _Entry:
    messages: list[Message] = field(default_factory=list)
    digests: list[str] = field(default_factory=lambda: [EMPTY_DIGEST])
    tool_results: dict[str, Message] = field(default_factory=dict)


class TranscriptCache:
    """A per-worker cache of run transcripts (least recently used runs are dropped)."""

    def __init__(self, max_runs: int = 1000) -> None:
        self._runs: OrderedDict[str, _Entry] = OrderedDict()
        self._max_runs = max_runs
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _entry(self, run_key: str) -> _Entry:
        key = _chain_key(run_key)
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs[key] = _Entry()
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        return entry

    def put_tool_result(self, run_key: str, call_id: str, message: Message) -> None:
        """Remember a tool activity's result message until the next model call takes it."""
        with self._lock:
            self._entry(run_key).tool_results[call_id] = message

    def resolve(
        self, run_key: str, count: int, digest: str, since: int, tail: list[dict[str, Any]]
    ) -> list[Message] | None:
        """The transcript's first `count` messages if this worker can rebuild them, else `None`."""
        with self._lock:
            entry = self._runs.get(_chain_key(run_key))
            if since == 0:  # a new run whose input rides in `tail`: nothing cached is needed
                messages, running = [], EMPTY_DIGEST
            elif entry is None or len(entry.messages) < since:
                self.misses += 1
                return None
            else:
                messages = entry.messages[:since]
                running = entry.digests[since]
            for item in tail:
                if "message" in item:
                    message = item["message"]
                else:
                    found = entry.tool_results.get(item.get("call_id", "")) if entry else None
                    if found is None:
                        self.misses += 1
                        return None
                    message = found
                messages.append(message)
                running = chain(running, message)
            if len(messages) != count or running != digest:
                self.misses += 1
                return None
            self.hits += 1
            return messages

    def store(self, run_key: str, messages: list[Message]) -> None:
        """Record `messages` as the run's transcript (after a model call appended its answer)."""
        with self._lock:
            entry = self._entry(run_key)
            keep = 0
            while (
                keep < len(entry.messages)
                and keep < len(messages)
                and entry.messages[keep] is messages[keep]
            ):
                keep += 1
            entry.messages = list(messages)
            del entry.digests[keep + 1 :]
            for message in messages[keep:]:
                entry.digests.append(chain(entry.digests[-1], message))
            entry.tool_results.clear()

    def forget(self, run_key: str) -> None:
        """Drop a finished run's transcript."""
        with self._lock:
            self._runs.pop(_chain_key(run_key), None)


class TranscriptRef:
    """The workflow's side: the transcript, its digest, and what `call_model` cannot know.

    Wraps the run's own message list (it lives in the run's `RunState`) and appends to it. A run
    that continued as new holds only the messages since then; `prior` names the run before
    (`{"run_id", "count", "digest"}`), whose `transcript_segment` query holds the rest.
    """

    def __init__(self, messages: list[Message], prior: dict[str, Any] | None = None) -> None:
        """Take over `messages`, which `call_model` can ask for (they are in the run's input)."""
        self.messages = messages
        self.prior = prior
        self.offset = int(prior["count"]) if prior else 0
        self.digest = str(prior["digest"]) if prior else EMPTY_DIGEST
        for message in messages:
            self.digest = chain(self.digest, message)
        self.since = int(prior.get("since", self.count)) if prior and not messages else self.count
        """Index of the first message not produced by an earlier `call_model` of the chain."""
        self.tail: list[dict[str, Any]] = list(prior.get("tail") or []) if prior else []
        """How `call_model` finds each message from `since` on (see `ModelCallInput.tail`).

        Carried across continue-as-new, so the worker that served the last model call finds the
        conversation in its cache instead of asking the runs of the chain for it."""

    def for_model_call(self) -> dict[str, Any]:
        """How a model activity's input names the transcript: `count`, `digest`, `since`, `tail`."""
        return {"count": self.count, "digest": self.digest, "since": self.since, "tail": self.tail}

    @property
    def count(self) -> int:
        """Messages in the whole transcript, earlier runs of the chain included."""
        return self.offset + len(self.messages)

    def append(self, message: Message, ref: dict[str, Any] | None) -> None:
        """Append `message`; `ref` tells `call_model` where to find it.

        `None` means it is already in this run's input: `call_model` asks the workflow for it.
        """
        self.messages.append(message)
        self.digest = chain(self.digest, message)
        if ref is None:
            self.since = self.count
            self.tail = []
        else:
            self.tail.append(ref)

    def append_input(self, messages: list[Message]) -> None:
        """Append the run's input messages, in the next model call's input when they are small.

        That costs one more copy of them in history and saves the run a `transcript` query;
        larger ones are asked for.
        """
        size = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
        for message in messages:
            self.append(message, {"message": message} if size <= INLINE_INPUT_BYTES else None)

    def model_replied(self, message: Message) -> None:
        """Append the model's reply: the worker that called the model keeps it."""
        self.messages.append(message)
        self.digest = chain(self.digest, message)
        self.since = self.count
        self.tail = []

    def reference(self, run_id: str) -> dict[str, Any]:
        """The whole transcript by reference, for the next run of the chain."""
        return {
            "run_id": run_id,
            "count": self.count,
            "digest": self.digest,
            "since": self.since,
            "tail": self.tail,
        }


INLINE_INPUT_BYTES = 8_192
"""A run's input messages (its prompt, and `messages` when given) this small in all ride in its
first `call_model` input, so that call asks the workflow nothing; larger ones are asked for."""

SEGMENT_PAGE_BYTES = 1_000_000
"""Largest page of messages one `transcript_segment` answer carries (the limit is 2 MB)."""


def page_of(messages: list[Message], start: int) -> list[Message]:
    """Messages from `start` on, as many as fit in `SEGMENT_PAGE_BYTES` (at least one)."""
    page: list[Message] = []
    size = 0
    for message in messages[start:]:
        size += len(json.dumps(message, ensure_ascii=False))
        if page and size > SEGMENT_PAGE_BYTES:
            break
        page.append(message)
    return page


async def assemble(
    segment_of: Callable[[str | None, int], Awaitable[dict[str, Any]]],
    kept: Callable[[str], Awaitable[list[Message]]] | None = None,
) -> list[Message]:
    """The whole transcript of a chain of runs, from the newest run back.

    `segment_of(run_id, start)` queries a run's `transcript_segment` from index `start`
    (`run_id` `None`: the run being served). Each run holds its own messages and names the run
    before it; a run that closed (continued as new) answers by replaying its history on a
    worker. A run that names a kept transcript instead (`stored`: a thread that moved to a new
    version, `toren.store._transcripts`) has every earlier message there: `kept(key)` reads it.
    """
    segments: list[list[Message]] = []
    run_id: str | None = None
    while True:
        own: list[Message] = []
        while True:
            segment = await segment_of(run_id, len(own))
            page = list(segment.get("messages") or [])
            own += page
            if not page or len(own) >= int(segment.get("total", len(own))):
                break
        segments.append(own)
        prior = segment.get("prior")
        if not prior:
            break
        if prior.get("stored") and kept is not None:
            segments.append((await kept(str(prior["stored"])))[: int(prior["count"])])
            break
        run_id = str(prior["run_id"])
    return [m for part in reversed(segments) for m in part]
