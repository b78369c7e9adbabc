"""The approval inbox's search attributes, kept current by `AgentRun`.

`TorenAgent`, `TorenStatus` (`running`, `waiting_approval`, `completed`, `failed`) and
`TorenPendingApprovals` are upserted only when they change, and only those the namespace has
registered (the worker looks them up at start and records them in the agent's spec).

`TorenAgentDigest` (the digest of the agent definition the run records, `AgentSpec.digest`)
rides along with the first of those upserts of each run: a run's first status change (waiting
for a person, its end) or the start of a continued run. It never makes an upsert of its own,
so the run's commands are the ones the previous release writes (a worker of either release
replays the other's history).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec

__all__ = ["StatusAttributes"]

AGENT_KEY = SearchAttributeKey.for_keyword("TorenAgent")
STATUS_KEY = SearchAttributeKey.for_keyword("TorenStatus")
PENDING_KEY = SearchAttributeKey.for_int("TorenPendingApprovals")
DIGEST_KEY = SearchAttributeKey.for_keyword("TorenAgentDigest")


class StatusAttributes:
    """What this run last upserted, so only changes are sent."""

    def __init__(self) -> None:
        self._agent = ""
        self._status = ""
        self._pending = -1
        self._digest = ""
        info = workflow.info()
        if info.continued_run_id is None:
            # A run started with them set (`toren.client` does) upserts only what changes. A
            # continued run inherits the run before's and upserts them all again, as it always
            # has (its recorded histories must replay).
            started = info.typed_search_attributes
            self._agent = started.get(AGENT_KEY) or ""
            self._status = started.get(STATUS_KEY) or ""
            pending = started.get(PENDING_KEY)
            self._pending = -1 if pending is None else pending

    def sync(
        self, spec: AgentSpec | None, pending: int, final: str | None = None, home: str = ""
    ) -> None:
        """Upsert what changed: the agent once, the status, the count of waiting calls.

        `home`: the agent the run was started as, which owns it after a handoff too (the
        inbox, the run list and the HTTP API's access checks all go by it); default the spec's.
        """
        if spec is None or not spec.search_attributes:
            return
        agent = home or spec.name
        have = set(spec.search_attributes)
        status = final or ("waiting_approval" if pending else "running")
        updates: list[SearchAttributeUpdate[Any]] = []
        if self._agent != agent and "TorenAgent" in have:
            updates.append(AGENT_KEY.value_set(agent))
        if status != self._status and "TorenStatus" in have:
            updates.append(STATUS_KEY.value_set(status))
        if pending != self._pending and "TorenPendingApprovals" in have:
            updates.append(PENDING_KEY.value_set(pending))
        self._agent, self._status, self._pending = agent, status, pending
        if updates and spec.digest != self._digest and "TorenAgentDigest" in have:
            updates.append(DIGEST_KEY.value_set(spec.digest))
            self._digest = spec.digest
        if updates:
            workflow.upsert_search_attributes(updates)
