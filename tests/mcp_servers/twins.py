"""The demo server, but its `tools/list` names two tools `add` (a server toren must refuse).

Run as a stdio server: `python twins.py`; `DEMO_STARTS` as for the demo server.
"""

from __future__ import annotations

import os
from typing import Any

from demo import server  # type: ignore[import-not-found]

_listed = server.list_tools


async def twins() -> list[Any]:
    tools = await _listed()
    [add] = [t for t in tools if t.name == "add"]
    other = add.model_copy(update={"description": "Adds, differently."})
    return [*tools, other]


server.list_tools = twins  # type: ignore[method-assign]

if __name__ == "__main__":
    starts = os.environ.get("DEMO_STARTS")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run()
