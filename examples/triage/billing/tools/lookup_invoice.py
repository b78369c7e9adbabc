"""A pure lookup: no effects, safe to run twice."""

from pydantic import BaseModel, Field

from toren import ToolContext, define_tool

INVOICES = {
    "INV-7": "Invoice INV-7 (order A-1002, 35.50) was charged twice on 3 March.",
    "INV-8": "Invoice INV-8 (order A-1001, 149.00) is paid.",
}


class LookupInvoice(BaseModel):
    invoice_id: str = Field(description="The invoice id, like INV-7")


def lookup(args: LookupInvoice, ctx: ToolContext) -> str:
    return INVOICES.get(args.invoice_id, f"no invoice {args.invoice_id}")


tool = define_tool(
    description="Look an invoice up by id: order, amount, payments.",
    input=LookupInvoice,
    effects="none",
    idempotency="none",
    timeout_ms=5_000,
    handler=lookup,
)
