"""define_tool's metadata and execution fields: annotations, progress_argument, execution_mode.

Checked when a tool is defined, when its agent loads (a worker, `toren check`, `list_tools`),
and shown where a person or a program looks at an agent's tools.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from toren import ConfigError, define_tool, list_tools
from toren.worker.activities._runtime import AgentRuntime


def handler(args: Any, ctx: Any) -> str:
    return "ok"


QUERY = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

SEARCH_TOOL = """
from toren import define_tool

tool = define_tool(
    description="Search the web.",
    input={"type": "object", "properties": {"query": {"type": "string"}}},
    execution_mode="provider",
    execution_provider="anthropic",
    provider_options={"max_uses": 2},
    progress_argument="query",
    annotations={"source": "anthropic"},
)
"""

LOOKUP_TOOL = """
from toren import define_tool

tool = define_tool(
    description="Look an order up.",
    input={"type": "object", "properties": {"order_id": {"type": "string"}}},
    effects="none",
    idempotency="none",
    progress_argument="order_id",
    annotations={"team": "billing", "tags": ["orders", "read-only"]},
    handler=lambda a, c: "found",
)
"""


def write(folder: Path, yaml_text: str, tools: dict[str, str]) -> Path:
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.yaml").write_text(yaml_text)
    (folder / "instructions.md").write_text("Help.")
    for name, source in tools.items():
        (folder / "tools" / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


# -- annotations and progress_argument -----------------------------------------------------


def test_annotations_and_progress_argument_are_kept() -> None:
    tool = define_tool(
        name="search",
        description="Search.",
        input=QUERY,
        annotations={"team": "search", "cost": 0.01},
        progress_argument="query",
        handler=handler,
    )
    assert tool.annotations == {"team": "search", "cost": 0.01}
    assert tool.progress_argument == "query"
    assert tool.execution_mode == "local"


def test_annotations_must_be_json() -> None:
    with pytest.raises(ConfigError) as err:
        define_tool(
            name="search",
            description="Search.",
            annotations={"ok": [1, "two"], "when": object(), "ratio": float("nan")},
            handler=handler,
        )
    text = str(err.value)
    assert "tool 'search'" in text
    assert "annotations['when'] is not JSON-serialisable" in text
    assert "annotations['ratio'] is not JSON-serialisable" in text
    assert "'ok'" not in text
    with pytest.raises(ConfigError, match=r"tool 'search'.*annotations must be a dict"):
        define_tool(name="search", description="S.", annotations=["x"], handler=handler)  # type: ignore[typeddict-item]


def test_progress_argument_must_name_an_input_property() -> None:
    with pytest.raises(ConfigError) as err:
        define_tool(
            name="search",
            description="Search.",
            input=QUERY,
            progress_argument="querry",
            handler=handler,
        )
    text = str(err.value)
    assert "tool 'search'" in text
    assert "progress_argument 'querry' is not an argument of the tool's input" in text
    assert "(its arguments: 'query')" in text and "did you mean 'query'" in text
    with pytest.raises(ConfigError, match="its arguments: none: the tool takes no arguments"):
        define_tool(name="ping", description="Ping.", progress_argument="x", handler=handler)


# -- execution_mode ------------------------------------------------------------------------


def test_a_provider_tool_has_no_handler_and_is_built_at_once() -> None:
    tool = define_tool(
        name="web_search",
        description="Search the web.",
        execution_mode="provider",
        execution_provider="anthropic",
        provider_options={"max_uses": 3},
    )
    assert tool.handler is None and tool.execution_provider == "anthropic"
    assert tool.provider_options == {"max_uses": 3}


def test_a_provider_tool_refuses_what_toren_would_do_for_it() -> None:
    with pytest.raises(ConfigError) as err:
        define_tool(  # type: ignore[call-overload]
            name="web_search",
            description="Search the web.",
            execution_mode="provider",
            handler=handler,
            approval="always",
            timeout_ms=1000,
            provider_options={"name": "other"},
        )
    text = str(err.value)
    assert "execution_mode='provider' needs execution_provider" in text
    assert "takes no handler" in text
    assert "approval cannot gate a tool the provider runs" in text
    assert "timeout_ms has no effect on a tool the provider runs" in text
    assert "provider_options: 'name' is the tool's own name" in text


def test_execution_mode_and_provider_fields_are_checked() -> None:
    with pytest.raises(ConfigError, match="execution_mode must be one of"):
        define_tool(name="x", description="X.", execution_mode="remote", handler=handler)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="execution_provider is for a tool the provider runs"):
        define_tool(name="x", description="X.", execution_provider="anthropic", handler=handler)


def test_provider_tools_refused_where_the_model_cannot_run_them(tmp_path: Path) -> None:
    cases = {
        "openai/gpt-4o": "is run by provider 'anthropic', but the agent's model 'openai/gpt-4o' "
        "is provider 'openai''s",
        "mock/echo": "is run by provider 'anthropic', but the agent's model 'mock/echo'",
    }
    for model, expected in cases.items():
        folder = write(
            tmp_path / model.replace("/", "_"),
            f"name: searcher\nmodel: {model}\n",
            {"web_search": SEARCH_TOOL},
        )
        with pytest.raises(ConfigError) as err:
            AgentRuntime.load([folder], environ={"OPENAI_API_KEY": "k"})
        assert "tool 'web_search' (execution_provider='anthropic')" in str(err.value)
        assert expected in str(err.value)
        with pytest.raises(ConfigError, match="execution_provider='anthropic'"):
            list_tools(folder)
    # A tool of OpenAI's on an OpenAI model: toren's Chat Completions cannot carry it.
    openai_tool = SEARCH_TOOL.replace('"anthropic"', '"openai"').replace(
        ',\n    provider_options={"max_uses": 2}', ""
    )
    folder = write(tmp_path / "oa", "name: oa\nmodel: openai/gpt-4o\n", {"web_search": openai_tool})
    with pytest.raises(ConfigError) as err:
        AgentRuntime.load([folder], environ={"OPENAI_API_KEY": "k"})
    assert "tool 'web_search' (execution_provider='openai')" in str(err.value)
    assert "provider 'openai' cannot run it on Chat Completions" in str(err.value)
    assert "set `modelSettings: {api: responses}`" in str(err.value)
    # A name Anthropic hosts no tool under.
    folder = write(
        tmp_path / "an", "name: an\nmodel: anthropic/claude-x\n", {"search": SEARCH_TOOL}
    )
    with pytest.raises(ConfigError, match="runs no hosted tool named 'search' \\(it runs: web_sea"):
        AgentRuntime.load([folder], environ={"ANTHROPIC_API_KEY": "k"})


def test_a_missing_key_and_a_refused_provider_tool_are_reported_together(tmp_path: Path) -> None:
    folder = write(tmp_path / "a", "name: a\nmodel: openai/gpt-4o\n", {"web_search": SEARCH_TOOL})
    with pytest.raises(ConfigError) as err:
        AgentRuntime.load([folder], environ={})
    assert "missing required env: OPENAI_API_KEY" in str(err.value)
    assert "execution_provider='anthropic'" in str(err.value)


def test_no_tool_may_invoke_a_provider_tool(tmp_path: Path) -> None:
    caller = LOOKUP_TOOL.replace(
        'handler=lambda a, c: "found",', 'uses=["web_search"],\n    handler=lambda a, c: "x",'
    )
    folder = write(
        tmp_path / "a",
        "name: a\nmodel: anthropic/claude-x\n",
        {"web_search": SEARCH_TOOL, "lookup": caller},
    )
    with pytest.raises(
        ConfigError, match="lists 'web_search', which anthropic runs inside the model"
    ):
        list_tools(folder)


def test_a_provider_tool_is_no_activity(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "a",
        "name: a\nmodel: anthropic/claude-x\n",
        {"web_search": SEARCH_TOOL, "lookup": LOOKUP_TOOL},
    )
    runtime = AgentRuntime.load([folder], environ={"ANTHROPIC_API_KEY": "k"})
    names = [getattr(a, "__temporal_activity_definition").name for a in runtime.activities()]
    assert "a.lookup" in names and "a.web_search" not in names
    spec = {t.name: t for t in runtime.agents["a"].spec().tools}
    assert spec["web_search"].execution_mode == "provider"
    assert spec["web_search"].execution_provider == "anthropic"
    assert spec["web_search"].progress_argument == "query"
    assert spec["lookup"].annotations == {"team": "billing", "tags": ["orders", "read-only"]}
    assert spec["lookup"].execution_mode == "local" and spec["lookup"].execution_provider is None


# -- where people and programs see them ----------------------------------------------------


def test_list_tools_shows_contracts_and_annotations_without_a_server(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "a",
        "name: a\nmodel: anthropic/claude-x\nbuiltin_tools: [read_attachment]\n",
        {"web_search": SEARCH_TOOL, "lookup": LOOKUP_TOOL},
    )
    tools = {t.name: t for t in list_tools(folder)}
    assert set(tools) == {"web_search", "lookup", "read_attachment"}
    lookup = tools["lookup"]
    assert (lookup.effects, lookup.idempotency, lookup.approval) == ("none", "none", "never")
    assert lookup.annotations == {"team": "billing", "tags": ["orders", "read-only"]}
    assert lookup.progress_argument == "order_id" and not lookup.builtin
    assert lookup.schema["properties"] == {"order_id": {"type": "string"}}
    search = tools["web_search"]
    assert (search.execution_mode, search.execution_provider) == ("provider", "anthropic")
    assert tools["read_attachment"].builtin and tools["read_attachment"].annotations == {}


def test_toren_check_shows_the_new_fields_and_refuses_a_misplaced_provider_tool(
    tmp_path: Path,
) -> None:
    folder = write(
        tmp_path / "a",
        "name: a\nmodel: anthropic/claude-x\n",
        {"web_search": SEARCH_TOOL, "lookup": LOOKUP_TOOL},
    )
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", "--no-schemas", str(folder)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "  tool web_search: run by anthropic inside the model call (no activity)" in lines
    assert "    progress: query" in lines
    assert '    annotations: {"team": "billing", "tags": ["orders", "read-only"]}' in lines
    assert "    Look an order up." in lines and "    Search the web." in lines
    assert "relying on defaults: lookup" in out.stdout
    assert "web_search" not in out.stdout.split("relying on defaults")[1]

    wrong = write(tmp_path / "b", "name: b\nmodel: openai/gpt-4o\n", {"web_search": SEARCH_TOOL})
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", str(wrong)], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "tool 'web_search' (execution_provider='anthropic') is run by provider" in out.stderr
