"""The concierge's restaurant desk: a small MCP server over stdio (the `mcp` package).

The worker starts it (agent.yaml `mcp_servers.dining`) inside bubblewrap, once per worker, and
the agent sees its tools as `dining__find_restaurants` and `dining__book_table`. Run it alone
with `python mcp_server.py` (it speaks MCP on stdin/stdout).

`book_table` is an external effect: toren sends each call's idempotency key in the request's
`_meta` (`io.toren/idempotency_key`), the same on every attempt, so a retried booking is the
same booking. When `CONCIERGE_BOOKINGS` names a file, each booking is appended to it once (a
JSON line keyed by that key); otherwise bookings live only as long as this process.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("dining")

RESTAURANTS = {
    "green-fork": {"name": "The Green Fork", "area": "Riverside", "cuisine": "modern European",
                   "diets": ["vegetarian", "vegan"], "meals": ["lunch", "dinner"], "seats": 6},
    "harbour-grill": {"name": "Harbour Grill", "area": "Old Port", "cuisine": "seafood",
                      "diets": [], "meals": ["dinner"], "seats": 8},
    "nonna-rosa": {"name": "Nonna Rosa", "area": "Market Square", "cuisine": "Italian",
                   "diets": ["vegetarian"], "meals": ["dinner"], "seats": 4},
    "saffron-house": {"name": "Saffron House", "area": "Riverside", "cuisine": "Indian",
                      "diets": ["vegetarian", "vegan"], "meals": ["lunch", "dinner"], "seats": 10},
}  # fmt: skip

_booked: dict[str, str] = {}
"""Confirmations by idempotency key, for this process."""


@server.tool()
def find_restaurants(party_size: int, meal: str = "dinner", diet: str = "") -> str:
    """Restaurants with a table for `party_size` at `meal` (lunch or dinner), suiting `diet`
    (vegetarian, vegan, or empty for any): one a line, with the id `book_table` takes."""
    if meal not in ("lunch", "dinner"):
        raise ToolError(f"meal must be 'lunch' or 'dinner', got {meal!r}")
    found = [
        f"{rid}: {r['name']} ({r['cuisine']}, {r['area']})"
        for rid, r in RESTAURANTS.items()
        if meal in r["meals"]
        and party_size <= int(r["seats"])
        and (not diet or diet.lower() in r["diets"])
    ]
    if not found:
        return f"no {diet or 'restaurant'} table for {party_size} at {meal}"
    return "\n".join(found)


@server.tool()
def book_table(
    restaurant_id: str, day: str, time: str, party_size: int, name: str, ctx: Context
) -> str:
    """Book a table: the restaurant's id (from `find_restaurants`), the day, the time (HH:MM),
    how many people and the guest's name. Returns the confirmation."""
    restaurant = RESTAURANTS.get(restaurant_id)
    if restaurant is None:
        raise ToolError(f"no restaurant {restaurant_id!r}; ids come from find_restaurants")
    if not 1 <= party_size <= int(restaurant["seats"]):
        raise ToolError(f"{restaurant['name']} seats 1 to {restaurant['seats']} people")
    meta = ctx.request_context.meta or {}
    key = str(meta.get("io.toren/idempotency_key") or f"{restaurant_id}/{day}/{time}/{name}")
    code = "CF-" + hashlib.sha256(key.encode()).hexdigest()[:6].upper()
    if key not in _booked:
        _booked[key] = code
        _record(key, {"restaurant_id": restaurant_id, "day": day, "time": time,
                      "party_size": party_size, "name": name, "confirmation": code})  # fmt: skip
    return (
        f"booked {restaurant['name']} for {party_size} on {day} at {time} "
        f"under {name}, confirmation {code}"
    )


def _record(key: str, booking: dict[str, object]) -> None:
    """Append `booking` to the ledger file once per key (a restarted server may see it again)."""
    ledger = os.environ.get("CONCIERGE_BOOKINGS", "")
    if not ledger:
        return
    path = Path(ledger)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text().splitlines() if path.exists() else []
    if any(json.loads(line)["key"] == key for line in lines):
        return
    with path.open("a") as f:
        f.write(json.dumps({"key": key, **booking}) + "\n")


if __name__ == "__main__":
    server.run()
