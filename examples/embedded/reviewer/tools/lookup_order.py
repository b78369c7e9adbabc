"""A pure lookup: no effects, safe to run twice."""

from pydantic import BaseModel, Field

from toren import ToolContext, define_tool

ORDERS = {
    "A-1001": {"status": "delivered", "total": 149.0, "item": "kettle", "note": "arrived damaged"},
    "A-1002": {"status": "shipped", "total": 35.5, "item": "mug"},
}


class LookupOrder(BaseModel):
    order_id: str = Field(description="The order id, like A-1001")


def lookup(args: LookupOrder, ctx: ToolContext) -> dict[str, object]:
    order = ORDERS.get(args.order_id)
    if order is None:
        return {"error": f"no order {args.order_id}"}
    return {"order_id": args.order_id, **order}


tool = define_tool(
    description="Look an order up by id: status, total, item, notes.",
    input=LookupOrder,
    effects="none",
    idempotency="none",
    timeout_ms=5_000,
    handler=lookup,
)
