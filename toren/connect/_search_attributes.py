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
