"""toren's search attributes: an approval inbox across runs, in Temporal's own visibility.

`TorenAgent` (keyword), `TorenStatus` (keyword: running, waiting_approval, completed, failed)
and `TorenPendingApprovals` (int), kept current by `AgentRun`, and `TorenAgentDigest` (keyword:
the digest of the agent definition a run ran on, `toren.workflows._status`). `temporal-dev.sh`
registers them on the dev server; `toren setup` (`register`) on any other cluster. A worker on a
cluster without them still runs every workflow: it tells the workflow which ones exist, and warns
once.

```
temporal workflow list --query 'TorenStatus="waiting_approval"'
```
"""

from __future__ import annotations

import logging
import re
import weakref
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from toren.errors import UsageError

__all__ = [
    "AGENT_KEY",
    "PENDING_KEY",
    "SEARCH_ATTRIBUTES",
    "STATUS_KEY",
    "agent_clause",
    "missing",
    "register",
    "registered",
    "start_attributes",
]

log = logging.getLogger("toren")

SEARCH_ATTRIBUTES: dict[str, IndexedValueType.ValueType] = {
    "TorenAgent": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TorenStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TorenPendingApprovals": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "TorenAgentDigest": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}


async def registered(client: Client) -> list[str]:
    """Which of toren's search attributes the client's namespace has (empty if unknowable)."""
    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except Exception as err:  # e.g. no operator permission on a hosted namespace
        log.warning("cannot list search attributes (%s); runs will not set them", err)
        return []
    have = resp.custom_attributes
    for name, kind in SEARCH_ATTRIBUTES.items():
        if name in have and have[name] != kind:
            # An upsert of the wrong type fails every workflow task (BAD_SEARCH_ATTRIBUTES).
            log.warning(
                "search attribute %s is registered as %s but toren needs %s: runs will not set "
                "it (and the approval inbox cannot use it) until it is re-created with that type",
                name,
                _type_name(have[name]),
                _type_name(kind),
            )
    return [name for name, kind in SEARCH_ATTRIBUTES.items() if have.get(name) == kind]


def _type_name(kind: IndexedValueType.ValueType) -> str:
    return IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()


async def missing(client: Client) -> list[str]:
    """The search attributes of toren's that the namespace lacks (any type)."""
    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except Exception as err:
        log.warning("cannot list search attributes (%s)", err)
        return []
    return [name for name in SEARCH_ATTRIBUTES if name not in resp.custom_attributes]


async def register(client: Client) -> list[str]:
    """Register the missing ones; return what was added."""
    todo = await missing(client)
    if todo:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={name: SEARCH_ATTRIBUTES[name] for name in todo},
            )
        )
    return todo


_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def agent_clause(agent: str) -> str:
    """The visibility query clause that selects `agent`'s runs and threads.

    Raises:
        UsageError: `agent` is no agent name (it goes into the query as it is).
    """
    if not _AGENT_NAME.match(agent):
        raise UsageError(
            f"agent {agent!r} is not an agent name ([a-z][a-z0-9_]*, as in agent.yaml)"
        )
    return f'TorenAgent = "{agent}"'


AGENT_KEY = SearchAttributeKey.for_keyword("TorenAgent")
STATUS_KEY = SearchAttributeKey.for_keyword("TorenStatus")
PENDING_KEY = SearchAttributeKey.for_int("TorenPendingApprovals")

_registered: weakref.WeakKeyDictionary[Client, list[str]] = weakref.WeakKeyDictionary()
"""Which of toren's search attributes each client's namespace has, looked up once."""


async def start_attributes(client: Client, agent: str) -> TypedSearchAttributes:
    """The status search attributes a run or thread starts with, those the namespace has.

    Its first workflow task then upserts nothing (an upsert right after the agent's spec, a
    local activity, could come out ahead of a message's update on a replay of the first
    tasks: a nondeterminism error); a run started without them (by any other
    client) upserts them itself.
    """
    have = _registered.get(client)
    if have is None:
        have = _registered[client] = await registered(client)
    pairs: list[SearchAttributePair[Any]] = []
    if "TorenAgent" in have:
        pairs.append(SearchAttributePair(AGENT_KEY, agent))
    if "TorenStatus" in have:
        pairs.append(SearchAttributePair(STATUS_KEY, "running"))
    if "TorenPendingApprovals" in have:
        pairs.append(SearchAttributePair(PENDING_KEY, 0))
    return TypedSearchAttributes(pairs)
