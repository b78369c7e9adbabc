"""toren's search attributes: an approval inbox across runs, in Temporal's own visibility.

`TorenAgent` (keyword), `TorenStatus` (keyword: running, waiting_approval, completed, failed)
and `TorenPendingApprovals` (int), kept current by `AgentRun`. `temporal-dev.sh` registers them
on the dev server; `toren setup` (`register`) on any other cluster. A worker on a cluster
without them still runs every workflow: it tells the workflow which ones exist, and warns once.

```
temporal workflow list --query 'TorenStatus="waiting_approval"'
```
"""

from __future__ import annotations

import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

__all__ = ["SEARCH_ATTRIBUTES", "missing", "register", "registered"]

log = logging.getLogger("toren")

SEARCH_ATTRIBUTES: dict[str, IndexedValueType.ValueType] = {
    "TorenAgent": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TorenStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TorenPendingApprovals": IndexedValueType.INDEXED_VALUE_TYPE_INT,
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
    return [name for name in SEARCH_ATTRIBUTES if name in resp.custom_attributes]


async def missing(client: Client) -> list[str]:
    """The search attributes of toren's that the namespace lacks."""
    have = await registered(client)
    return [name for name in SEARCH_ATTRIBUTES if name not in have]


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
