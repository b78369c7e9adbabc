"""toren's wire types, found from what crosses a payload, as `{name: {fields, omits_defaults}}`.

Run as a script it prints them as JSON for whichever toren it imports, so
`tests/test_releases.py` runs it once under the previous release's wheel (`PYTHONPATH`, see
`tests._releases`) and once under the current code. It uses toren's public names only
(`AgentRuntime`, `AgentRun`, `AgentThread`), plus `toren.agent._converter`'s set of types
written without their defaults, so it runs on both releases.

How the types are found, with no list of them to keep up:

1. The signatures of every activity a worker registers (`AgentRuntime.load(...).activities()`
   for an agent with one tool: the spec, approval, model, compaction and tool activities) and
   of every handler of `AgentRun` and `AgentThread` as Temporal sees them (run, signals,
   updates, queries): each toren dataclass named in a parameter or return hint.
2. Every dataclass defined beside one of those (toren keeps its wire types together, in
   `toren.agent._types`, `toren.agent._spec` and so on): the workflows take their start input
   raw, so `RunInput` and `ThreadInput` are in no signature, only beside `RunResult`.
3. Every dataclass a field of a found one holds, however nested (`RunInput.carry` is a
   `RunState`, whose `spec` is an `AgentSpec` of `ToolSpec`s), until nothing new turns up.

What it cannot see: a JSON object typed `dict` (a `Message`, `ToolCallResult.changes`); its
keys are read with `.get` and defaults, so they are not required fields.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["wire_types"]

_TOOL = """
from toren import define_tool
tool = define_tool(description="A tool, so the worker registers a tool activity.",
                   handler=lambda args, ctx: "ok")
"""


def _activities() -> list[Any]:
    import toren

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "wire"
        (folder / "tools").mkdir(parents=True)
        (folder / "agent.yaml").write_text("name: wire\nmodel: mock/echo\n")
        (folder / "instructions.md").write_text("Wire types.")
        (folder / "tools" / "probe.py").write_text(_TOOL)
        return list(toren.AgentRuntime.load([folder], environ={}).activities())


def _handlers() -> list[Any]:
    from temporalio import workflow

    import toren

    found: list[Any] = []
    for cls in (toren.AgentRun, toren.AgentThread):
        defn = workflow._Definition.must_from_class(cls)
        found.append(defn.run_fn)
        for handlers in (defn.signals, defn.queries, defn.updates):
            found += [h.fn for h in handlers.values()]
    return found


def _dataclasses_in(hint: Any) -> set[type]:
    """toren's dataclasses named anywhere in `hint` (`list[X] | None`, `dict[str, X]`, ...)."""
    found: set[type] = set()
    toren_type = isinstance(hint, type) and hint.__module__.split(".")[0] == "toren"
    if toren_type and dataclasses.is_dataclass(hint):
        found.add(hint)
    for arg in typing.get_args(hint):
        found |= _dataclasses_in(arg)
    return found


def _beside(cls: type) -> set[type]:
    module: ModuleType = sys.modules[cls.__module__]
    return {
        v
        for v in vars(module).values()
        if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == module.__name__
    }


def wire_types() -> dict[str, dict[str, Any]]:
    """Every wire type of the toren this process imports (see the module's docstring)."""
    from toren.agent._converter import _OMIT_DEFAULTS

    roots: set[type] = set()
    for fn in [*_activities(), *_handlers()]:
        for hint in typing.get_type_hints(fn).values():
            roots |= _dataclasses_in(hint)
    todo = set().union(*(_beside(cls) for cls in roots)) | roots
    found: set[type] = set()
    while todo:
        cls = todo.pop()
        found.add(cls)
        for hint in typing.get_type_hints(cls).values():
            todo |= _dataclasses_in(hint) - found
    return {
        cls.__name__: {
            "module": cls.__module__,
            "omits_defaults": cls in _OMIT_DEFAULTS,
            "fields": {
                f.name: f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING
                for f in dataclasses.fields(cls)
            },
        }
        for cls in sorted(found, key=lambda c: c.__name__)
    }


if __name__ == "__main__":
    import toren

    json.dump({"toren": toren.__file__, "types": wire_types()}, sys.stdout, indent=1)
