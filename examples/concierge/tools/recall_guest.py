"""Read back what `remember_guest` stored, in this message or an earlier one."""

from toren import ToolContext, define_tool


async def recall(args: dict[str, object], ctx: ToolContext) -> str:
    # The thread's state outlives each message: a later message's call reads what an earlier
    # one set, from the workflow (a query), never from the transcript.
    guest = await ctx.get_value("guest") or {}
    parts = [f"{key.replace('_', ' ')}: {value}" for key, value in guest.items()]
    return ", ".join(parts) or "nothing yet"


# No `timeout_ms`: a tool with no effects, no key and a timeout of 10 s or less runs as a
# local activity, and there `ctx.get_value` waits on a query its own workflow task holds up
# until the call times out. The default timeout keeps it a regular activity.
tool = define_tool(
    description="What you know about the guest so far (from remember_guest). Call it first.",
    input={"type": "object", "properties": {}, "additionalProperties": False},
    effects="none",
    idempotency="none",
    max_attempts=3,
    handler=recall,
)
