"""The inbox: every call and question waiting for a person in the namespace.

Found through toren's `TorenStatus` search attribute (a run with a waiting call or question is
`waiting_approval`), then asked of each waiting run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import Client

from toren.agent._question_types import PendingQuestion
from toren.agent._types import PendingApproval
from toren.client._questions import pending_questions
from toren.connect import _search_attributes as search_attributes
from toren.errors import UndecodablePayloadError

__all__ = ["InboxItem", "QuestionItem", "inbox", "pending", "question_inbox"]


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
    items: list[QuestionItem] = []
    async for execution in client.list_workflows(_waiting_query(agent)):
        try:
            questions = await pending_questions(client, execution.id)
        except UndecodablePayloadError:
            raise
        except Exception:  # finished since the listing, or a worker that asks no questions
            continue
        name = execution.typed_search_attributes.get(search_attributes.AGENT_KEY) or ""
        items += [QuestionItem(run_id=execution.id, agent=name, question=q) for q in questions]
    return sorted(items, key=lambda i: i.question.asked_at)


def _waiting_query(agent: str | None) -> str:
    # A run terminated, cancelled or timed out while waiting keeps its last TorenStatus.
    query = (
        'WorkflowType IN ("AgentRun", "AgentThread") AND ExecutionStatus = "Running" '
        'AND TorenStatus = "waiting_approval"'
    )
    if agent is not None:
        query += f" AND {search_attributes.agent_clause(agent)}"
    return query
