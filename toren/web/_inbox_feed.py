"""The inbox as Server-Sent Events (`GET /v1/inbox/stream`), from one watcher per app.

```
data: {"inbox": [{"run_id": "support-1a2b", "agent": "support", "age_s": 3.2, "call": {...}}],
       "questions": []}

```

An event goes out at once on connect, and again whenever the set of waiting calls or questions
the token may see changes (a call parks, is decided, a run ends). However many clients listen,
the app has one `InboxWatcher`: it reads visibility (`toren.client._inbox.waiting`: the runs
whose `TorenStatus` is `waiting_approval`, then each one's `pending_approvals` and
`pending_questions` queries) at most every `WATCH_S`, only while a client listens, and only for
the agents its listeners may see; each client is sent its own token's share. A client that
joins while the watcher's last read covers its agents gets that read at once, without another.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from temporalio.client import Client

from toren.client._inbox import InboxItem, QuestionItem, waiting
from toren.web import _models as m
from toren.web._auth import Access

__all__ = ["WATCH_S", "InboxWatcher", "inbox_events"]

log = logging.getLogger("toren.web")

WATCH_S = 1.0
"""The shortest time between two reads of the watcher."""
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""


class InboxWatcher:
    """Reads what waits for a person, for every listening client of the app at once."""

    def __init__(self, client: Callable[[], Awaitable[Client]], every_s: float = WATCH_S) -> None:
        self._client = client
        self.every_s = every_s
        """The time between two reads."""
        self.reads = 0
        """How many times the watcher has listed visibility (each read lists it once)."""
        self._listeners: dict[int, Access] = {}
        self._ids = itertools.count()
        self._calls: list[InboxItem] = []
        self._questions: list[QuestionItem] = []
        self._covered: frozenset[str] | None = frozenset()
        """The agents the last read asked for (`None`: all)."""
        self._version = 0
        self._changed = asyncio.Event()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether the watcher reads now (while at least one client listens)."""
        return self._task is not None and not self._task.done()

    def _wanted(self) -> frozenset[str] | None:
        agents: set[str] = set()
        for access in self._listeners.values():
            if access.agents is None:
                return None
            agents |= access.agents
        return frozenset(agents)

    def _covers(self, access: Access) -> bool:
        if self._covered is None:
            return True
        return access.agents is not None and access.agents <= self._covered

    async def _run(self) -> None:
        failed = False
        loop = asyncio.get_running_loop()
        while self._listeners:
            self._kick.clear()
            began = loop.time()
            wanted = self._wanted()
            try:
                client = await self._client()
                self.reads += 1
                # A run whose query fails this once keeps its calls (covered by the last read).
                before = (self._calls, self._questions) if self._covered == wanted else None
                calls, questions = await waiting(client, wanted, before=before)
            except Exception as err:  # Temporal away, a codec missing: keep the last read
                if not failed:
                    log.warning("the inbox watcher could not read the inbox: %s", err)
                failed = True
            else:
                failed = False
                self._calls, self._questions, self._covered = calls, questions, wanted
                self._version += 1
                self._changed.set()
                self._changed = asyncio.Event()
            # Till the next read: `every_s` from this one's start, or sooner when a listener
            # joined whose agents this read left out (though never twice in `every_s`).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.every_s)
            await asyncio.sleep(max(0.0, began + min(self.every_s, WATCH_S) - loop.time()))

    def _view(self, access: Access) -> m.InboxList:
        return m.InboxList(
            inbox=[
                m.InboxEntry(
                    run_id=i.run_id, agent=i.agent, age_s=i.age.total_seconds(), call=i.call
                )
                for i in self._calls
                if access.allows(i.agent)
            ],
            questions=[
                m.QuestionEntry(
                    run_id=i.run_id,
                    agent=i.agent,
                    age_s=i.age.total_seconds(),
                    question=i.question,
                )
                for i in self._questions
                if access.allows(i.agent)
            ],
        )

    async def watch(self, access: Access) -> AsyncIterator[m.InboxList]:
        """What `access` may see that waits: now, then each time it changes."""
        key = next(self._ids)
        self._listeners[key] = access
        if not self.running:
            self._covered = frozenset()  # what it read before it stopped is stale now
            self._task = asyncio.ensure_future(self._run())
        elif not self._covers(access):
            self._kick.set()
        seen = self._version - 1 if self._covers(access) else self._version
        last: tuple[object, ...] | None = None
        try:
            while True:
                changed = self._changed
                if self._version > seen and self._covers(access):
                    seen = self._version
                    view = self._view(access)
                    now = (
                        tuple((e.run_id, e.call.call_id) for e in view.inbox),
                        tuple((q.run_id, q.question.question_id) for q in view.questions),
                    )
                    if now != last:
                        last = now
                        yield view
                        continue
                await changed.wait()
        finally:
            del self._listeners[key]
            if not self._listeners and self._task is not None:
                # The last client left: stop reading at once.
                self._task.cancel()
                self._task = None


async def inbox_events(watcher: InboxWatcher, access: Access) -> AsyncIterator[str]:
    """The SSE text of `watcher.watch(access)`, with a keep-alive comment when idle."""
    views = watcher.watch(access)
    yield "retry: 1000\n\n"
    next_view: asyncio.Task[m.InboxList] | None = None
    try:
        while True:
            if next_view is None:
                next_view = asyncio.ensure_future(anext(views))
            done, _ = await asyncio.wait({next_view}, timeout=KEEPALIVE_S)
            if not done:
                yield ": keep-alive\n\n"
                continue
            view = next_view.result()
            next_view = None
            data = json.dumps(view.model_dump(mode="json"), separators=(",", ":"))
            yield f"data: {data}\n\n"
    finally:
        if next_view is not None:
            next_view.cancel()
            with contextlib.suppress(BaseException):
                await next_view
        await views.aclose()  # type: ignore[attr-defined]
