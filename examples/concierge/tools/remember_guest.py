"""Remember the guest across messages: the thread's durable state (`ctx.set_value`)."""

from pydantic import BaseModel, Field

from toren import ToolContext, define_tool


class Guest(BaseModel):
    name: str | None = Field(None, description="What the guest likes to be called")
    diet: str | None = Field(None, description="vegetarian, vegan, or none")
    party_size: int | None = Field(None, ge=1, le=20, description="How many they usually are")
    notes: str | None = Field(None, description="Anything else worth remembering, briefly")


async def remember(args: Guest, ctx: ToolContext) -> str:
    # One key for the profile; what this call leaves out stays as it was.
    guest = await ctx.get_value("guest") or {}
    guest.update(args.model_dump(exclude_none=True))
    await ctx.set_value("guest", guest)
    return "remembered " + describe(guest)


def describe(guest: dict[str, object]) -> str:
    """The profile as one line, the way `recall_guest` reads it back."""
    parts = [f"{key.replace('_', ' ')}: {value}" for key, value in guest.items()]
    return ", ".join(parts) or "nothing yet"


# No effects, no key and a timeout of 10 s or less: it runs as a local activity (no server
# round trip); `ctx.get_value` there reads the state the run sent along with the call.
tool = define_tool(
    description=(
        "Remember what the guest tells you about themselves (name, diet, usual party size, "
        "notes) for the rest of the conversation. Only the fields given change."
    ),
    input=Guest,
    effects="none",
    idempotency="none",
    timeout_ms=5_000,
    max_attempts=3,
    handler=remember,
)
