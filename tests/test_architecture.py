"""The shape of the package: layers, no import circles, a small public face, one error tree.

These read the code (with grimp's import graph, or by importing it), so a change that breaks
the layering DESIGN.md draws fails here before it wedges a workflow in Temporal's sandbox.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import toren
from toren import errors
from toren.errors import TorenError

ROOT = Path(__file__).resolve().parent.parent

SIDES: dict[str, set[str]] = {
    "agent": {"agent"},
    "store": {"agent", "store"},
    "workflows": {"agent", "workflows"},
    "connect": {"agent", "store", "workflows", "connect"},
    "client": {"agent", "store", "workflows", "connect", "client"},
    "web": {"agent", "store", "workflows", "connect", "client", "web"},
    "cli": {"agent", "store", "workflows", "connect", "client", "web", "cli"},
    "worker": {"agent", "store", "workflows", "connect", "worker"},
}
"""Each side of the package (`toren/<side>/`) → the sides it may import, besides `toren.errors`
(which imports nothing of toren) and the top-level `toren` (whose names load lazily)."""

RUNS_AGENT_CODE = {"toren.cli._agents"}
"""The `toren` commands that run agent code on this machine (`worker`, `check`, `tools`): the
one place the CLI reaches into the worker's side, imported only when one of them runs."""

WORKFLOW_MAY_IMPORT = {
    "toren.errors", "toren.agent._types", "toren.agent._spec", "toren.agent._transcript",
    "toren.agent._schema", "toren.agent._converter", "toren.agent._sdk_private",
    "toren.agent._context_plan",
}  # fmt: skip
"""Beyond `toren.workflows` itself: the contract types and errors, their JSON form, the
transcript digest and its compaction plan, the pure JSON Schema check the workflow runs on a
model's arguments, and the stream's private SDK names."""

NEVER_IN_THE_SANDBOX = ("httpx", "pypdf", "docx", "openpyxl", "psycopg", "yaml", "boto3")
"""Packages importing the workflow must not load (I/O and parsers belong to activities)."""

PUBLIC_MODULES = {"toren.cli", "toren.client", "toren.connect", "toren.errors", "toren.testing",
                  "toren.worker", "toren.workflows", "toren.web"}  # fmt: skip
"""Modules a user may import by path."""

ROOMS = {"toren.agent", "toren.store", "toren.worker.activities", "toren.worker.tools",
         "toren.worker.models", "toren.cli.__main__"}  # fmt: skip
"""Packages that name a part of a side; what is in them is private (`_` modules)."""

TOP_LEVEL = {"__init__.py", "errors.py", "testing.py", "py.typed"}
"""The top of `toren/`: the public names, the error tree, the testing helpers; the rest are
the sides' packages."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # Imports under TYPE_CHECKING and inside functions count: a circle through either is one.
    return grimp.build_graph("toren", include_external_packages=True)


def test_workflows_import_only_contract_types_approvals_and_run_state(
    graph: grimp.ImportGraph,
) -> None:
    wrong = {}
    for module in sorted(m for m in graph.modules if m.startswith("toren.workflows")):
        ours = {m for m in graph.find_modules_directly_imported_by(module) if m.startswith("toren")}
        bad = {m for m in ours if not m.startswith("toren.workflows")} - WORKFLOW_MAY_IMPORT
        if bad:
            wrong[module] = sorted(bad)
    assert not wrong, f"workflow modules import outside their layer: {wrong}"
    upstream = graph.find_upstream_modules("toren.workflows", as_package=True)
    assert not {m for m in upstream if m.split(".")[0] in NEVER_IN_THE_SANDBOX}
    assert not {m for m in upstream if m.startswith(("toren.worker", "toren.client"))}


def _side(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "toren"


def test_each_side_imports_only_the_sides_below_it(graph: grimp.ImportGraph) -> None:
    wrong = []
    for module in sorted(m for m in graph.modules if m.startswith("toren.")):
        side = _side(module)
        if side not in SIDES:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            if not imported.startswith("toren.") or imported == "toren.errors":
                continue
            if _side(imported) in SIDES[side]:
                continue
            if module in RUNS_AGENT_CODE and _side(imported) == "worker":
                continue
            lines = [d["line_number"] for d in graph.get_import_details(
                importer=module, imported=imported)]  # fmt: skip
            wrong.append(f"{module} -> {imported} (line {lines})")
    assert not wrong, "imports across the sides DESIGN.md draws:\n" + "\n".join(wrong)
    assert not graph.find_modules_directly_imported_by("toren.errors") & {
        m for m in graph.modules if m.startswith("toren")
    }


def test_the_top_level_holds_only_public_entry_modules() -> None:
    top = {p.name for p in (ROOT / "toren").iterdir() if p.name != "__pycache__"}
    packages = {p.name for p in (ROOT / "toren").iterdir() if (p / "__init__.py").exists()}
    assert top - packages == TOP_LEVEL
    assert packages == {"agent", "cli", "client", "connect", "store", "web", "worker", "workflows"}
    for name in packages:
        doc = importlib.import_module(f"toren.{name}").__doc__ or ""
        assert len(doc.splitlines()) >= 3, f"toren.{name} says what runs there and what it imports"


@pytest.mark.parametrize("module", ["toren.client", "toren.cli", "toren.web", "toren.connect"])
def test_client_sides_load_no_worker_code(module: str) -> None:
    code = (
        f"import json, sys; import {module}; "
        "print(json.dumps([m for m in sys.modules if m.startswith('toren.worker')]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert json.loads(out) == [], f"importing {module} loads the worker's side"


def test_no_import_circle_anywhere(graph: grimp.ImportGraph) -> None:
    ours = sorted(m for m in graph.modules if m.startswith("toren"))
    edges = {
        m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i.startswith("toren"))
        for m in ours
    }
    circles = _cycles(edges)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), plus self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in edges.get(node, []):
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_importing_the_workflow_in_a_fresh_interpreter_stays_small() -> None:
    out = subprocess.run(
        [sys.executable, "-c",
         "import json, sys; import toren.workflows; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    loaded = json.loads(out)
    heavy = [m for m in loaded if m.split(".")[0] in NEVER_IN_THE_SANDBOX]
    assert not heavy, f"importing the workflow loads {heavy}"
    ours = [m for m in loaded if m.startswith("toren")]
    assert not [
        m for m in ours if m.startswith(("toren.worker.tools", "toren.worker.activities"))
    ], ours
    assert not [m for m in ours if m.startswith("toren.worker.models")], ours
    print(f"\nimporting toren.workflows loads {len(ours)} toren modules: {', '.join(ours)}")


def test_public_names_are_sorted_and_resolve() -> None:
    names = toren.__all__
    assert names == sorted(names, key=lambda n: (n[0].islower(), n)), "keep __all__ sorted"
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(toren, name) is not None, name
    assert set(dir(toren)) >= set(names)
    assert set(errors.__all__) <= set(names), "every error is a public name"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = toren.nope  # type: ignore[attr-defined]


def test_modules_name_their_exports() -> None:
    missing = [m.__name__ for m in _all_modules() if not hasattr(m, "__all__")]
    assert not missing, f"modules without __all__: {missing}"
    for module in _all_modules():
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.__all__ names {name!r}"


def test_internals_are_private_modules() -> None:
    public = [
        m.__name__
        for m in _all_modules()
        if not any(part.startswith("_") for part in m.__name__.split(".")[1:])
        and m.__name__ != "toren"
    ]
    assert set(public) <= PUBLIC_MODULES | ROOMS, sorted(set(public) - PUBLIC_MODULES - ROOMS)


def test_readme_and_docs_use_only_public_names() -> None:
    readme = "\n".join(
        p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    )
    code = "\n".join(re.findall(r"```python\n(.*?)```", readme, re.S))
    assert code, "the README and docs have Python examples"
    for module, names in re.findall(r"^\s*from (toren[\w.]*) import ([^\n#]+)", code, re.M):
        assert not any(p.startswith("_") for p in module.split(".")), module
        for name in re.findall(r"\b(\w+)(?: as \w+)?", names.replace("(", "")):
            if module == "toren":
                is_module = f"toren.{name}" in PUBLIC_MODULES
                assert name in toren.__all__ or is_module, f"the docs import toren.{name}"
            else:
                assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
    for name in re.findall(r"\btoren\.([A-Z]\w+)", readme):
        assert name in toren.__all__, f"the docs name toren.{name}"


def test_every_exception_is_in_the_tree() -> None:
    outside = []
    for module in _all_modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not issubclass(value, TorenError)
            ):
                outside.append(f"{module.__name__}.{name}")
    assert not outside, f"exceptions outside TorenError: {outside}"


def _all_modules() -> list[object]:
    modules = [toren]
    for info in pkgutil.walk_packages(toren.__path__, "toren."):
        modules.append(importlib.import_module(info.name))
    return modules  # type: ignore[return-value]
