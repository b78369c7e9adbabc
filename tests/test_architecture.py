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

WORKFLOW_MAY_IMPORT = {
    "toren.errors", "toren._types", "toren._transcript", "toren._schema", "toren._sdk_private"
}  # fmt: skip
"""Beyond `toren.workflows` itself: the contract types and errors, the transcript digest, and
the pure JSON Schema check the workflow runs on a model's arguments."""

NEVER_IN_THE_SANDBOX = ("httpx", "pypdf", "docx", "openpyxl", "psycopg", "yaml", "boto3")
"""Packages importing the workflow must not load (I/O and parsers belong to activities)."""

PUBLIC_MODULES = {"toren.cli", "toren.client", "toren.connect", "toren.errors", "toren.testing",
                  "toren.worker", "toren.workflows", "toren.activities", "toren.models",
                  "toren.tools", "toren.web"}  # fmt: skip
"""Modules a user may import by path; everything else behind them is a `_private` module."""


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
    assert not {m for m in upstream if m.startswith(("toren.tools", "toren.activities"))}


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
    assert not [m for m in ours if m.startswith(("toren.tools", "toren.activities"))], ours
    assert not [m for m in ours if m.startswith("toren.models")], ours
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
    assert set(public) <= PUBLIC_MODULES, sorted(set(public) - PUBLIC_MODULES)


def test_readme_uses_only_public_names() -> None:
    readme = (ROOT / "README.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", readme, re.S))
    assert code, "the README has Python examples"
    for module, names in re.findall(r"^\s*from (toren[\w.]*) import ([^\n#]+)", code, re.M):
        assert not any(p.startswith("_") for p in module.split(".")), module
        for name in re.findall(r"\b(\w+)(?: as \w+)?", names.replace("(", "")):
            if module == "toren":
                is_module = f"toren.{name}" in PUBLIC_MODULES
                assert name in toren.__all__ or is_module, f"README imports toren.{name}"
            else:
                assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
    for name in re.findall(r"\btoren\.([A-Z]\w+)", readme):
        assert name in toren.__all__, f"README names toren.{name}"


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
