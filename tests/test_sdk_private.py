"""Each private name of `temporalio` toren uses still holds on the installed SDK.

One test per use (`toren.agent._sdk_private.USES`): on a newer SDK that renamed one, the failure says
which name, which toren module relies on it and what to do. `.ci/run` runs this file (and the
core suite) on the newest `temporalio` pip offers too.
"""

from __future__ import annotations

import pytest
from temporalio.contrib.workflow_streams import WorkflowStream

from toren.agent import _sdk_private
from toren.agent._sdk_private import USES


@pytest.mark.parametrize("use", sorted(USES))
def test_private_name_still_holds(use: str) -> None:
    problem = USES[use]()
    assert problem is None, problem


def test_a_missing_name_is_reported_with_the_module_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(WorkflowStream, "_on_publish")
    problem = USES["WorkflowStream._on_publish"]()
    assert problem is not None
    assert "`WorkflowStream._on_publish` is gone" in problem
    assert "toren.workflows._stream_state (LiveStream) relies on it" in problem
    assert f"install temporalio~={_sdk_private.TESTED}.0" in problem


def test_a_changed_signature_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def changed(self: object, topic: str) -> None: ...

    monkeypatch.setattr(WorkflowStream, "_publish_to_topic", changed)
    problem = USES["WorkflowStream._publish_to_topic"]()
    assert problem is not None
    assert "now takes (topic), not (topic, value)" in problem


def test_the_pin_matches_the_tested_minor() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    [pin] = [d for d in project["project"]["dependencies"] if d.startswith("temporalio")]
    major, minor = _sdk_private.TESTED.split(".")
    assert pin == f"temporalio>={_sdk_private.TESTED},<{major}.{int(minor) + 1}", pin


def test_py_typed_ships_as_package_data() -> None:
    """PEP 561: without the marker a user's mypy treats every toren import as `Any`."""
    import importlib.resources
    import tomllib
    from pathlib import Path

    assert importlib.resources.files("toren").joinpath("py.typed").is_file()
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["toren"]
