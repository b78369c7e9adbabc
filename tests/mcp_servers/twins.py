"""The demo server, but its `tools/list` names two tools `add` (a server toren must refuse).

Run as a stdio server: `python twins.py`.
"""

from __future__ import annotations

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
    server.run()
