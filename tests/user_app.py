"""A user's own Temporal code, for tests that run toren beside it on one worker."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def shout(text: str) -> str:
    """The user's own activity."""
    return text.upper()


@workflow.defn
class UserFlow:
    """The user's own workflow."""

    @workflow.run
    async def run(self, text: str) -> str:
        """Shout `text` through the user's activity."""
        return await workflow.execute_activity(
            shout, text, start_to_close_timeout=timedelta(seconds=10)
        )
