"""An external effect with a keyed idempotency and a predicate approval."""

import json
from pathlib import Path

from pydantic import BaseModel, Field

from toren import ToolContext, define_tool


class Refund(BaseModel):
    order_id: str = Field(description="The order to refund")
    amount: float = Field(gt=0, description="Amount to refund, in dollars")
    reason: str = Field(description="Why, in a few words")


def refund(args: Refund, ctx: ToolContext) -> str:
    # The payment provider would take ctx.idempotency_key so a retried call refunds once;
    # the demo writes to a ledger file keyed the same way.
    ledger = Path(ctx.env["SUPPORT_OUTBOX"]) / "refunds.jsonl"
    ledger.parent.mkdir(parents=True, exist_ok=True)
    seen = ledger.read_text().splitlines() if ledger.exists() else []
    if not any(json.loads(line)["key"] == ctx.idempotency_key for line in seen):
        entry = {"key": ctx.idempotency_key, "order_id": args.order_id, "amount": args.amount}
        with ledger.open("a") as f:
            f.write(json.dumps(entry) + "\n")
    return f"refunded {args.amount:.2f} on order {args.order_id} (ref {ctx.idempotency_key})"


tool = define_tool(
    description="Refund an order. Refunds over 100 wait for a person's approval.",
    input=Refund,
    effects="external",
    idempotency="keyed",
    approval=lambda args: args.amount > 100,
    timeout_ms=10_000,
    max_attempts=2,
    handler=refund,
)
