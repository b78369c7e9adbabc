"""Read back what `remember_guest` stored, in this message or an earlier one."""

from toren import ToolContext, define_tool


async def recall(args: dict[str, object], ctx: ToolContext) -> str:
    # The thread's state outlives each message: a later message's call reads what an earlier
    # one set, from the run (sent along with this local call), never from the transcript.
    guest = await ctx.get_value("guest") or {}
    parts = [f"{key.replace('_', ' ')}: {value}" for key, value in guest.items()]
    return ", ".join(parts) or "nothing yet"


# No effects, no key and a timeout of 10 s or less: it runs as a local activity (no server
# round trip); `ctx.get_value` there reads the state the run sent along with the call.
tool = define_tool(
    description="What you know about the guest so far (from remember_guest). Call it first.",
    input={"type": "object", "properties": {}, "additionalProperties": False},
    effects="none",
    idempotency="none",
    timeout_ms=5_000,
    max_attempts=3,
    handler=recall,
)
