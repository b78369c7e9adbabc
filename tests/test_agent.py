"""agent.yaml and tools/ discovery: every error names the file and the key, all at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toren import ConfigError, MissingEnvError, load_agent
from toren.worker.activities._runtime import AgentRuntime
from toren.worker.models import ScriptedModel

TOOL = """
from toren import define_tool
tool = define_tool(description="Echo.", handler=lambda args, ctx: "ok")
"""


def write(folder: Path, yaml_text: str, tools: dict[str, str] | None = None) -> Path:
    (folder / "tools").mkdir(parents=True, exist_ok=True)
    (folder / "agent.yaml").write_text(textwrap.dedent(yaml_text))
    (folder / "instructions.md").write_text("Be brief.")
    for name, source in (tools or {}).items():
        (folder / "tools" / name).write_text(textwrap.dedent(source))
    return folder


def test_loads_and_defaults(tmp_path: Path) -> None:
    write(tmp_path, "name: shop\nmodel: mock/echo\n", {"echo.py": TOOL, "_helpers.py": "X = 1"})
    agent = load_agent(tmp_path)
    assert agent.name == "shop"
    assert agent.task_queue == "shop"
    assert agent.config.limits.max_steps_per_task == 50
    assert list(agent.tools) == ["echo"]  # named after the file; _helpers.py skipped
    assert agent.instructions == "Be brief."


def test_unknown_keys_are_typos(tmp_path: Path) -> None:
    write(tmp_path, "name: shop\nmodel: mock/echo\nlimits:\n  maxStepPerTask: 3\nbuiltins: []\n")
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    text = str(err.value)
    assert str(tmp_path / "agent.yaml") in text
    assert "unknown key 'limits.maxStepPerTask'" in text
    assert "unknown key 'builtins'" in text


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("name: Shop\nmodel: mock/echo\n", "name: 'Shop' must match"),
        ("name: shop\nmodel: gpt-4\n", "model: 'gpt-4' must be openai/<model>"),
        ("name: shop\n", "missing key 'model'"),
        ("name: shop\nmodel: mock/echo\nlimits: {maxStepsPerTask: 0}\n", "limits.maxStepsPerTask"),
        ("name: shop\nmodel: mock/echo\ninstructions: nope.md\n", "instructions: file 'nope.md'"),
        ("name: [shop\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, yaml_text: str, message: str) -> None:
    write(tmp_path, yaml_text)
    with pytest.raises(ConfigError, match=None) as err:
        load_agent(tmp_path)
    assert message in str(err.value)
    assert "agent.yaml" in str(err.value)


def test_model_settings_and_retry(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        name: shop
        model: openai/qwen2.5-coder
        modelSettings: {temperature: 0, top_p: 0.5, seed: 42, stop: "END"}
        modelRetry: {maxAttempts: 3, initialIntervalS: 0.5}
        """,
    )
    config = load_agent(tmp_path).config
    assert config.model_settings.model_dump(exclude_none=True) == {
        "temperature": 0.0, "top_p": 0.5, "seed": 42, "stop": ["END"],
    }  # fmt: skip
    assert (config.model_retry.max_attempts, config.model_retry.max_interval_s) == (3, 60.0)
    default = load_agent(write(tmp_path / "plain", "name: shop\nmodel: mock/echo\n")).config
    assert default.model_settings.model_dump(exclude_none=True) == {}
    assert default.model_retry.max_attempts == 10


def test_bad_model_settings_and_retry_name_the_key(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        name: shop
        model: anthropic/claude-sonnet-4-5
        modelSettings: {temperature: 1.5, seed: 1, topk: 3}
        modelRetry: {maxAttempts: 0, initialIntervalS: 30, maxIntervalS: 5}
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    text = str(err.value)
    assert "unknown key 'modelSettings.topk'; did you mean 'topP'?" in text
    assert "modelRetry.maxAttempts: must be greater than or equal to 1, got 0" in text
    assert "modelSettings: seed: Anthropic's API takes no seed; remove it" in text
    assert "modelSettings: temperature: Anthropic takes 0 to 1, got 1.5" in text
    assert "modelRetry: maxIntervalS (5) is below initialIntervalS (30)" in text


def test_thinking_is_for_anthropic_and_gemini_models_only(tmp_path: Path) -> None:
    write(
        tmp_path, "name: shop\nmodel: openai/gpt-4o\nmodelSettings: {thinkingBudgetTokens: 2048}\n"
    )
    with pytest.raises(ConfigError, match="thinkingBudgetTokens: only anthropic/, gemini/ and"):
        load_agent(tmp_path)
    write(
        tmp_path,
        "name: shop\nmodel: gemini/gemini-2.5-flash\nmodelSettings: {thinkingBudgetTokens: 2048}\n",
    )
    assert load_agent(tmp_path).config.model_settings.thinking_budget_tokens == 2048


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2", "must be 0 (no heartbeat timeout) or at least 10 seconds (calls beat every 2 s); "
         "got 2.0"),
        ("9.9999", "or at least 10 seconds (calls beat every 2 s); got 9.9999"),
        ("-1", "must be 0 (no heartbeat timeout) or at least 10 seconds"),
        ("soon", "heartbeatTimeoutS: must be a valid number"),
        ("off", "heartbeatTimeoutS: must be a number of seconds (0: none); got False"),
        ("true", "heartbeatTimeoutS: must be a number of seconds (0: none); got True"),
        (".inf", "heartbeatTimeoutS: must be a finite number"),
        ("1e9", "heartbeatTimeoutS: must be less than or equal to 86400"),
    ],
)  # fmt: skip
def test_a_heartbeat_timeout_the_calls_cannot_keep_names_the_key(
    tmp_path: Path, value: str, problem: str
) -> None:
    write(tmp_path, f"name: shop\nmodel: mock/echo\nheartbeatTimeoutS: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    assert problem in str(err.value)


@pytest.mark.parametrize(("value", "seconds"), [("0", 0), ("10", 10), ("30.5", 30.5), (None, 10)])
def test_a_heartbeat_timeout_of_0_or_10_s_and_more_loads(
    tmp_path: Path, value: str | None, seconds: float
) -> None:
    setting = "" if value is None else f"heartbeatTimeoutS: {value}\n"
    write(tmp_path, f"name: shop\nmodel: mock/echo\n{setting}")
    assert load_agent(tmp_path).config.heartbeat_timeout_s == seconds


def test_one_error_lists_every_stage(tmp_path: Path) -> None:
    # A type error, a bad model and a broken tool used to take three rounds of fixes.
    write(
        tmp_path,
        "name: shop\nmodel: gpt-4\nlimits:\n  maxStepsPerTask: many\nbuiltin_tools: [web_serch]\n",
        {"broken.py": "import not_a_module_anywhere\n", "echo.py": TOOL},
    )
    (tmp_path / "instructions.md").unlink()
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    yaml_file = tmp_path / "agent.yaml"
    assert err.value.problems == [
        f"{yaml_file}: model: 'gpt-4' must be openai/<model>, azure/<deployment>, "
        "anthropic/<model>, gemini/<model>, vertex/<model>, bedrock/<modelId> or mock/<name>",
        f"{yaml_file}: limits.maxStepsPerTask: must be a valid integer, unable to parse string "
        "as an integer, got 'many'",
        f"{yaml_file}: instructions: file 'instructions.md' not found",
        f"{tmp_path / 'tools' / 'broken.py'}: failed to import: ModuleNotFoundError: No module "
        "named 'not_a_module_anywhere'",
        f"{yaml_file}: builtin_tools: unknown built-in 'web_serch'; did you mean 'web_search'?",
    ]


def test_unreadable_yaml_still_checks_the_tools(tmp_path: Path) -> None:
    write(tmp_path, "name: [shop\n", {"nothing.py": "X = 1\n"})
    # While agent.yaml is unreadable the instructions' file name is unknown: not reported.
    (tmp_path / "instructions.md").unlink()
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    first, second = err.value.problems
    assert first.startswith(f"{tmp_path / 'agent.yaml'}: not valid YAML: ")
    assert (
        second
        == f"{tmp_path / 'tools' / 'nothing.py'}: defines no tool (assign `tool = define_tool(...)`)"
    )


def test_unknown_keys_suggest_the_closest_at_every_level(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        name: shop
        model: mock/echo
        buitin_tools: []
        limits: {maxStepPerTask: 3}
        env: {requried: [A]}
        sandbox: {netwrk: true}
        processes: {p: {workflow: W, taskqueue: q}}
        colour: blue
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    yaml_file = tmp_path / "agent.yaml"
    assert sorted(err.value.problems) == sorted(
        [
            f"{yaml_file}: unknown key 'buitin_tools'; did you mean 'builtin_tools'?",
            f"{yaml_file}: unknown key 'limits.maxStepPerTask'; did you mean 'maxStepsPerTask'?",
            f"{yaml_file}: unknown key 'env.requried'; did you mean 'required'?",
            f"{yaml_file}: unknown key 'sandbox.netwrk'; did you mean 'network'?",
            f"{yaml_file}: unknown key 'processes.p.taskqueue'; did you mean 'task_queue'?",
            f"{yaml_file}: unknown key 'colour' (known: agents, approvals, builtin_tools, "
            "context, description, env, handoffs, heartbeatTimeoutS, instructions, limits, "
            "maxTokens, mcp_servers, model, modelRetry, modelSettings, name, output, output_mode, "
            "output_model, processes, "
            "sandbox, stream, task_queue)",
        ]
    )


def test_a_key_that_fails_adds_no_made_up_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `env` fails, so the sandbox's names are not compared with it; `processes` fails, so
    # run_process is not told it has none. The tools are still checked.
    monkeypatch.setenv("TOREN_SANDBOX_UNCONFINED", "shop")  # with or without bwrap here
    write(
        tmp_path,
        "name: shop\nmodel: mock/echo\nenv: {required: [1X]}\n"
        "sandbox: {env: [TOKEN], unconfined: true}\n"
        "builtin_tools: [run_process]\nprocesses: {p: {}}\n",
        {"nothing.py": "X = 1\n"},
    )
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    yaml_file = tmp_path / "agent.yaml"
    assert err.value.problems == [
        f"{yaml_file}: env.required: '1X' is not a valid variable name",
        f"{yaml_file}: processes.p: give exactly one of agent: or workflow:",
        f"{tmp_path / 'tools' / 'nothing.py'}: defines no tool (assign `tool = define_tool(...)`)",
    ]


def test_a_bad_mock_script_names_the_step_and_key(tmp_path: Path) -> None:
    write(tmp_path, "name: shop\nmodel: mock/scripted\n")
    script = tmp_path / "mock_script.yaml"
    script.write_text(
        "- tool_calls: [{nmae: lookup, args: {id: 1}}]\n- 42\n- {text: ok, tools: []}\n- done\n"
    )
    with pytest.raises(ConfigError) as err:
        AgentRuntime.load([tmp_path], environ={})
    assert err.value.problems == [
        f"{script}: step 1: missing key 'tool_calls[0].name'",
        f"{script}: step 1: unknown key 'tool_calls[0].nmae'; did you mean 'name'?",
        f"{script}: step 2: must be the answer's text or a mapping of text: and tool_calls:, "
        "got 42",
        f"{script}: step 3: unknown key 'tools'; did you mean 'tool_calls'?",
    ]
    script.write_text("text: not a list\n")
    with pytest.raises(ConfigError, match="must be a YAML list of steps, got dict"):
        ScriptedModel.from_file(script)
    script.write_text("- [unclosed\n")
    with pytest.raises(ConfigError, match="mock_script.yaml: not valid YAML"):
        ScriptedModel.from_file(script)


def test_a_bad_model_timeout_setting_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "name: shop\nmodel: openai/gpt-4o-mini\n")
    monkeypatch.setenv("TOREN_MODEL_TIMEOUT_S", "2m")
    with pytest.raises(ConfigError, match="TOREN_MODEL_TIMEOUT_S='2m': must be a positive number"):
        AgentRuntime.load([tmp_path], environ={"OPENAI_API_KEY": "k"})


def test_tool_discovery_lists_every_problem(tmp_path: Path) -> None:
    dup = 'from toren import define_tool\ntool = define_tool(name="echo", description="x", handler=lambda a, c: "")\n'
    two = (
        "from toren import define_tool\n"
        'a = define_tool(description="a", handler=lambda a, c: "")\n'
        'b = define_tool(description="b", handler=lambda a, c: "")\n'
    )
    write(
        tmp_path,
        "name: shop\nmodel: mock/echo\n",
        {
            "echo.py": TOOL,
            "echo_again.py": dup,
            "nothing.py": "X = 1\n",
            "BadName.py": TOOL,
            "two.py": two,
            "broken.py": "import not_a_module_anywhere\n",
            "bad_field.py": 'from toren import define_tool\ntool = define_tool(description="x", effects="world", handler=lambda a, c: "")\n',
        },
    )
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    problems = "\n".join(err.value.problems)
    assert len(err.value.problems) == 6
    assert "echo_again.py: tool name 'echo' is also defined in" in problems
    assert "nothing.py: defines no tool" in problems
    assert "BadName.py: file name 'BadName' must be snake_case" in problems
    assert "two.py: defines 2 tools" in problems
    assert "broken.py: failed to import: ModuleNotFoundError" in problems
    assert "effects must be one of" in problems


def test_builtin_errors(tmp_path: Path) -> None:
    write(
        tmp_path,
        "name: shop\nmodel: mock/echo\nbuiltin_tools: [bash, web_scrape]\n",
    )
    with pytest.raises(ConfigError) as err:
        load_agent(tmp_path)
    text = str(err.value)
    assert "'bash' cannot be declared here; set `sandbox: true`" in text
    assert "unknown built-in 'web_scrape'" in text


def test_missing_env_names_every_variable_and_no_value(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        name: shop
        model: openai/gpt-4o-mini
        env:
          required: [SHOP_TOKEN, SHOP_DB_URL]
          optional: {SHOP_REGION: eu}
        """,
    )
    agent = load_agent(tmp_path)
    assert agent.required_env() == ["OPENAI_API_KEY", "SHOP_DB_URL", "SHOP_TOKEN"]
    with pytest.raises(MissingEnvError) as err:
        agent.resolve_env({"SHOP_TOKEN": "tok-very-secret", "UNRELATED": "x"})
    text = str(err.value)
    assert "OPENAI_API_KEY, SHOP_DB_URL" in text
    assert "tok-very-secret" not in text
    env = agent.resolve_env(
        {"SHOP_TOKEN": "t", "SHOP_DB_URL": "u", "OPENAI_API_KEY": "k", "HOME": "/root"}
    )
    # ctx.env holds declared names only, optional ones with their defaults.
    assert env == {
        "SHOP_TOKEN": "t",
        "SHOP_DB_URL": "u",
        "OPENAI_API_KEY": "k",
        "SHOP_REGION": "eu",
    }


def test_worker_start_reports_every_agents_missing_env(tmp_path: Path) -> None:
    a = write(tmp_path / "a", "name: a\nmodel: mock/echo\nenv: {required: [A_KEY]}\n")
    b = write(tmp_path / "b", "name: b\nmodel: anthropic/claude\n")
    with pytest.raises(ConfigError) as err:
        AgentRuntime.load([a, b], environ={})
    text = str(err.value)
    assert "agent 'a' is missing required env: A_KEY" in text
    assert "agent 'b' is missing required env: ANTHROPIC_API_KEY" in text


def test_cli_check_and_worker_errors(tmp_path: Path) -> None:
    folder = write(
        tmp_path,
        "name: shop\nmodel: mock/echo\nenv: {required: [SHOP_TOKEN, SHOP_KEY]}\n",
        {"echo.py": TOOL},
    )
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "check", str(folder)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "tool echo: effects=none idempotency=keyed approval=never" in out.stdout
    assert "missing here: SHOP_KEY, SHOP_TOKEN" in out.stdout
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    out = subprocess.run(
        [sys.executable, "-m", "toren.cli", "worker", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "missing required env: SHOP_KEY, SHOP_TOKEN" in out.stderr


def test_provider_endpoint_from_the_workers_environment(tmp_path: Path) -> None:
    # Not declared in agent.yaml, still honoured: pointing a worker at a local vLLM must not
    # send prompts and the key to api.openai.com.
    write(tmp_path, "name: shop\nmodel: openai/local-model\n")
    runtime = AgentRuntime.load(
        [tmp_path], environ={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    )
    assert runtime.agents["shop"].provider.base_url == "http://127.0.0.1:8000/v1"  # type: ignore[attr-defined]
