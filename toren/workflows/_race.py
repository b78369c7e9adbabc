"""Work that something else may cut short: a run's wall clock, a thread's `close`.

```python
result = await unless(self._loop(), workflow.sleep(left))
if result is None:  # the timer fired first; the loop, its calls and timers are cancelled
    raise RunError(...)
```
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

__all__ = ["unless"]

T = TypeVar("T")


async def unless(work: Coroutine[Any, Any, T], stop: Coroutine[Any, Any, Any]) -> T | None:
    """`work`'s result, or `None` when `stop` ends first (then `work` is cancelled and awaited).

    `work` is scheduled before `stop`, so the workflow's commands keep their order.
    """
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop)
    await workflow.wait([working, stopping], return_when=asyncio.FIRST_COMPLETED)
    if working.done():
        stopping.cancel()
        return working.result()
    working.cancel()
    with contextlib.suppress(asyncio.CancelledError, CancelledError, ActivityError):
        await working
    return None
