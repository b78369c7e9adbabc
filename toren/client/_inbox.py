"""The inbox: every call and question waiting for a person in the namespace.

Found through toren's `TorenStatus` search attribute (a run with a waiting call or question is
`waiting_approval`), then asked of each waiting run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client

from toren.agent._question_types import PendingQuestion
from toren.agent._types import PendingApproval
from toren.client._questions import pending_questions
from toren.connect import _search_attributes as search_attributes
from toren.errors import UndecodablePayloadError

__all__ = ["InboxItem", "QuestionItem", "inbox", "pending", "question_inbox", "waiting"]


async def pending(client: Client, run_id: str) -> list[PendingApproval]:
    """The run's calls waiting for a decision."""
    handle = client.get_workflow_handle(run_id)
    calls: list[PendingApproval] = await handle.query(
        "pending_approvals", result_type=list[PendingApproval]
    )
    return calls


@dataclass
class InboxItem:
    """A call waiting for a decision, somewhere in the namespace."""

    run_id: str
    agent: str
    call: PendingApproval

    @property
    def age(self) -> timedelta:
        """How long the call has waited."""
        since = datetime.fromisoformat(self.call.requested_at)
        return datetime.now(since.tzinfo) - since


async def inbox(client: Client, agent: str | None = None) -> list[InboxItem]:
    """Every call waiting for a decision in the namespace (oldest first).

    Uses the `TorenStatus` search attribute (visibility), then asks each waiting run.
    """
    items: list[InboxItem] = []
    async for execution in client.list_workflows(_waiting_query(agent)):
        try:
            calls = await pending(client, execution.id)
        except UndecodablePayloadError:
            raise  # every run of the namespace is encoded alike: say how to read them
        except Exception:  # finished between the listing and the query
            continue
        name = execution.typed_search_attributes.get(search_attributes.AGENT_KEY) or ""
        items += [InboxItem(run_id=execution.id, agent=name, call=c) for c in calls]
    return sorted(items, key=lambda i: i.call.requested_at)


@dataclass
class QuestionItem:
    """A question waiting for an answer, somewhere in the namespace."""

    run_id: str
    agent: str
    question: PendingQuestion

    @property
    def age(self) -> timedelta:
        """How long the question has waited."""
        since = datetime.fromisoformat(self.question.asked_at)
        return datetime.now(since.tzinfo) - since


async def question_inbox(client: Client, agent: str | None = None) -> list[QuestionItem]:
    """Every question waiting for an answer in the namespace (oldest first)."""
    return (await waiting(client, None if agent is None else [agent]))[1]


async def waiting(
    client: Client,
    agents: Iterable[str] | None = None,
    *,
    before: tuple[list[InboxItem], list[QuestionItem]] | None = None,
) -> tuple[list[InboxItem], list[QuestionItem]]:
    """Every waiting call and question of `agents` (`None`: all), from one visibility listing.

    Each waiting run is asked for both (a few at once); a run that finished since the listing,
    or whose worker asks no questions, adds what it answered. `before`: the previous read; a
    run still listed as waiting whose query fails this time (a busy worker, a timeout) keeps
    what it had there, so a watcher's readers do not see its calls vanish and come back.
    """
    kept_calls: dict[str, list[InboxItem]] = {}
    kept_questions: dict[str, list[QuestionItem]] = {}
    for item in before[0] if before else []:
        kept_calls.setdefault(item.run_id, []).append(item)
    for asked in before[1] if before else []:
        kept_questions.setdefault(asked.run_id, []).append(asked)
    wanted = None if agents is None else sorted(set(agents))
    if wanted == []:
        return [], []
    query = _waiting_query(None)
    if wanted is not None:
        clauses = [search_attributes.agent_clause(a) for a in wanted]  # checks each name
        query += f" AND ({' OR '.join(clauses)})"
    limit = asyncio.Semaphore(8)

    async def ask(run_id: str, name: str) -> tuple[list[InboxItem], list[QuestionItem]]:
        async with limit:
            calls: list[InboxItem] = []
            questions: list[QuestionItem] = []
            try:
                calls = [InboxItem(run_id, name, c) for c in await pending(client, run_id)]
            except UndecodablePayloadError:
                raise
            except Exception:  # finished since the listing, or its worker did not answer now
                calls = kept_calls.get(run_id, [])
            try:
                found = await pending_questions(client, run_id, timeout=5)
                questions = [QuestionItem(run_id, name, q) for q in found]
            except UndecodablePayloadError:
                raise
            except Exception:  # as above, or a worker of a release that asks no questions
                questions = kept_questions.get(run_id, [])
            return calls, questions

    asks = [
        ask(e.id, e.typed_search_attributes.get(search_attributes.AGENT_KEY) or "")
        async for e in client.list_workflows(query)
    ]
    answers = await asyncio.gather(*asks)
    calls = sorted((c for a in answers for c in a[0]), key=lambda i: i.call.requested_at)
    questions = sorted((q for a in answers for q in a[1]), key=lambda i: i.question.asked_at)
    return calls, questions


def _waiting_query(agent: str | None) -> str:
    # A run terminated, cancelled or timed out while waiting keeps its last TorenStatus.
    query = (
        'WorkflowType IN ("AgentRun", "AgentThread") AND ExecutionStatus = "Running" '
        'AND TorenStatus = "waiting_approval"'
    )
    if agent is not None:
        query += f" AND {search_attributes.agent_clause(agent)}"
    return query
