"""Query the sales warehouse (here: a small table). A person approves every query."""

from pydantic import BaseModel

from toren import define_tool

_SALES = {("EU", 2024): 41_250, ("EU", 2023): 36_900, ("US", 2024): 18_400}


class Query(BaseModel):
    region: str
    year: int


def query_sales(args: Query, ctx: object) -> str:
    units = _SALES.get((args.region, args.year))
    if units is None:
        return f"no sales recorded for {args.region} {args.year}"
    return f"{units} e-bikes in {args.region} in {args.year}"


tool = define_tool(
    description="Units sold in a region and year, from the sales warehouse.",
    input=Query,
    effects="none",
    idempotency="none",
    approval="always",
    timeout_ms=10_000,
    handler=query_sales,
)
