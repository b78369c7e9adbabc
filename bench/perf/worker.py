"""One benchmark worker process: `python -m bench.perf.worker ADDRESS VARIANT TARGET READY`.

VARIANT is `floor` (TARGET: a task queue) or `toren` (TARGET: an agent folder). It runs in its
own process so its peak RSS (VmHWM) is its own, writes the file READY once its workers poll,
and serves until its stdin closes (the driver closes it when done). Its stdout and stderr go
to a log file: the SDK core logs there, and an unread pipe would block the worker.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench.perf.floor import PerfFloor, PerfFloorParked, model, tool

__all__ = ["main"]


async def _serve(address: str, variant: str, target: str, ready: Path) -> None:
    loop = asyncio.get_running_loop()
    stdin_closed = loop.create_future()
    # A reader thread, not the event loop: a blocking read must not stall the worker.
    loop.run_in_executor(None, sys.stdin.read).add_done_callback(
        lambda _: loop.call_soon_threadsafe(stdin_closed.set_result, None)
    )
    if variant == "floor":
        client = await Client.connect(address)
        async with Worker(
            client,
            task_queue=target,
            workflows=[PerfFloor, PerfFloorParked],
            activities=[model, tool],
        ):
            ready.touch()
            await stdin_closed
        return
    from toren.connect import connect
    from toren.worker import serve

    client = await connect(target_host=address)
    async with serve(client, [target]):
        ready.touch()
        await stdin_closed


def main() -> None:
    """Entry point."""
    address, variant, target, ready = sys.argv[1:5]
    asyncio.run(_serve(address, variant, target, Path(ready)))


if __name__ == "__main__":
    main()
