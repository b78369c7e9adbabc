"""An external effect that a person always approves."""

from pathlib import Path

from toren import ToolContext, define_tool


@define_tool(
    description="Email the customer. A person approves every email before it is sent.",
    input={
        "type": "object",
        "properties": {
            "to": {"type": "string", "description": "Recipient address"},
            "subject": {"type": "string"},
            "body": {"type": "string"},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    effects="external",
    idempotency="keyed",
    approval="always",
    timeout_ms=15_000,
)
def send_email(args: dict[str, str], ctx: ToolContext) -> str:
    outbox = Path(ctx.env["SUPPORT_OUTBOX"])
    outbox.mkdir(parents=True, exist_ok=True)
    # One file per idempotency key: a retried send overwrites instead of sending twice.
    name = ctx.idempotency_key.replace(":", "_").replace("/", "_")
    (outbox / f"{name}.eml").write_text(
        f"To: {args['to']}\nSubject: {args['subject']}\n\n{args['body']}\n"
    )
    return f"email to {args['to']} queued"
