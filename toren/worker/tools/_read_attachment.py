"""The `read_attachment` built-in: read a file attached to the run, one page at a time.

```yaml
# agent.yaml
builtin_tools: [read_attachment]
```

Attach files before the run (`toren.store._attachments.attach("report.pdf")` returns the id) and
start it with `attachments=[id]`. The model calls `read_attachment {"file_id": "att_...",
"page": 2}` and gets `{"name": "report.pdf", "page": 2, "of": 12, "text": "..."}`. Only ids
attached to the current run can be read. They are read from `attachments/` in the worker's store
(`TOREN_STORE`, default `.toren` in its cwd), or the older `TOREN_ATTACHMENTS` directory.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toren.agent._context import ToolContext, Variable
from toren.store._attachments import ENV_VAR, AttachmentError, open_store
from toren.worker.tools._read_only import read_only_tool

__all__ = ["ReadAttachmentInput", "read", "tool"]


class ReadAttachmentInput(BaseModel):
    """Arguments of `read_attachment`."""

    model_config = ConfigDict(extra="forbid")

    file_id: str = Field(
        min_length=1, description="The attachment's id from the run's attachment list (att_...)."
    )
    page: int = Field(1, ge=1, description="Which page to read, from 1; each is ~4,000 chars.")


def read(args: ReadAttachmentInput, ctx: ToolContext) -> dict[str, Any]:
    """Return one page of an attachment of this run.

    Args:
        args: The attachment id and page number.
        ctx: The call's context; `ctx.attachments` lists the ids this run may read.

    Returns:
        `{"name": str, "page": int, "of": int, "text": str}`.

    Raises:
        AttachmentError: The id is not attached to this run or not in the store, or the page is
            out of range.
    """
    if args.file_id not in ctx.attachments:
        attached = ", ".join(ctx.attachments) if ctx.attachments else "none"
        raise AttachmentError(
            f"attachment {args.file_id!r} is not attached to this run (attached: {attached}); "
            "use one of the listed ids"
        )
    # TOREN_ATTACHMENTS arrives in ctx.env as the tool's variable; without it (a bare unit
    # call) the default store is used, the one `attach` writes to.
    store = open_store(ctx.env.get(ENV_VAR) or None)
    info = store.info(args.file_id)
    return {
        "name": info.name,
        "page": args.page,
        "of": info.pages,
        "text": store.page(args.file_id, args.page),
    }


tool = read_only_tool(
    name="read_attachment",
    description=(
        "Read a file attached to this run, one page (~4,000 characters) at a time. "
        "The reply says how many pages there are (`of`); read further pages as needed."
    ),
    input=ReadAttachmentInput,
    # Pages never change once stored: a repeated read returns the same text.
    timeout_ms=10_000,
    variables=[Variable(ENV_VAR, type="text", required=False)],
    handler=read,
)
"""The `read_attachment` tool: its contract is fixed, agent.yaml holds no options for it."""
