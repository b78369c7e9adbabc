"""No secret the worker holds reaches history, whoever finds it: a prying MCP server, a tool.

One worker process serves two agents and holds credentials of its own (`TEMPORAL_API_KEY`, the
store's AWS keys, `TOREN_WEB_TOKENS`). A stdio MCP server of the first agent tries to read the
worker's environment through `/proc` (its parent's and every process's): it runs in its own pid
namespace and finds none of it (unconfined, where the operator allows it, it finds them all). A plain tool of the same agent, in the worker's own process,
reads them from `os.environ`: every one is redacted, since each run's redactor knows every
secret of the worker. Then every payload of the history is decoded and searched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from tests._secret_oracle import search
from tests.conftest import fetch_history, result_of, secret, task_failures
from toren import client as toren_client
from toren.client._events import render
from toren.testing import DevServer
from toren.worker._redact import MARKER

PRYING = Path(__file__).resolve().parent / "mcp_servers" / "prying.py"

PEEK = """
import os
from urllib.parse import urlsplit
from toren import define_tool

NAMES = ["OTHER_AGENT_KEY", "TEMPORAL_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
         "TOREN_WEB_TOKENS", "GITHUB_TOKEN"]

def peek(args, ctx):
    # Not given to this agent: read straight from the worker's environment.
    found = {name: os.environ.get(name, "unset") for name in NAMES}
    found["web token"] = os.environ["TOREN_WEB_TOKENS"].partition(":")[0]
    found["db password"] = urlsplit(os.environ["DATABASE_URL"]).password
    return found

tool = define_tool(description="Reads the worker's environment.", handler=peek)
"""


@pytest.mark.parametrize("confined", [True, False], ids=["bwrap", "unconfined"])
async def test_a_prying_mcp_server_and_tool_get_no_worker_secret_into_history(
    client: Client,
    make_agent: Callable[..., Path],
    dev_server: DevServer,
    agent_name: str,
    confined: bool,
) -> None:
    tag = uuid.uuid4().hex[:10]
    own = secret(f"own-{tag}")
    other = secret(f"other-agent-{tag}")
    api_key = secret(f"temporal-api-{tag}")
    aws = secret(f"aws/secret+{tag}")
    session = secret(f"aws-session-{tag}")
    web_token = secret(f"web-tok-{tag}")
    github = secret(f"ghp_{tag}")
    db_password = secret(f"pw-{tag}-db")
    worker_env = {
        # Nothing of this machine's own environment: unconfined, the server reads all of it.
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "TEMPORAL_ADDRESS": dev_server.address,
        "TEMPORAL_API_KEY": api_key,
        "TEMPORAL_TLS": "false",  # the dev server speaks plain gRPC; the key is still sent
        "AWS_SECRET_ACCESS_KEY": aws,
        "AWS_SESSION_TOKEN": session,
        "TOREN_WEB_TOKENS": f"{web_token}:{agent_name}",
        "GITHUB_TOKEN": github,
        "DATABASE_URL": f"postgresql://app:{db_password}@db/shop",
        "OWN_KEY": own,
        "OTHER_AGENT_KEY": other,
        **({} if confined else {"TOREN_MCP_UNCONFINED": "1"}),
    }
    folder = make_agent(
        tools={"peek": PEEK},
        env={"required": ["OWN_KEY"]},
        mcp_servers={"pry": {"command": [sys.executable, str(PRYING)], "tools": ["pry"]}},
        script=[
            {"tool_calls": [{"id": "p", "name": "pry__pry"}, {"id": "k", "name": "peek"}]},
            "done",
        ],
    )
    second = make_agent(name=f"{agent_name}_b", env={"required": ["OTHER_AGENT_KEY"]})
    worker = subprocess.Popen(
        [sys.executable, "-m", "toren.cli", "worker", str(folder), str(second)],
        env=worker_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        handle = await toren_client.start_run(client, folder.name, "go")
        assert (await result_of(handle)).text == "done"
    finally:
        worker.kill()
        worker.wait()
    history = await fetch_history(client, handle.id)
    assert not task_failures(history)
    calls = {e["callId"]: e for e in render(history) if e["type"] == "ToolCallCompleted"}

    # In bubblewrap the server read no environment of the worker's, not even the names;
    # unconfined (the operator's choice) it read them all, and the redactor hid every value.
    names = [n for n in worker_env if n.endswith(("_KEY", "_TOKEN", "_TOKENS"))]
    pried = [n for n in names if f"{n}=" in calls["p"]["result"]]
    # The tool in the worker's process read them all; each came out redacted.
    peeked = json.loads(calls["k"]["result"])

    values = [own, other, api_key, aws, session, web_token, github, db_password]
    # The suite's own oracle (its encodings, not the redactor's), over every decoded payload.
    hits = search(history.events, values, client.data_converter.payload_converter.from_payload)
    assert (pried, peeked, hits) == ([] if confined else names, dict.fromkeys(peeked, MARKER), [])
    assert len(peeked) == 8


def test_without_bubblewrap_a_stdio_server_starts_only_when_the_operator_allows(
    make_agent: Callable[..., Path], tmp_path: Path
) -> None:
    folder = make_agent(
        mcp_servers={"pry": {"command": [sys.executable, str(PRYING)], "tools": ["pry"]}}
    )
    no_bwrap = tmp_path / "bin"  # a PATH where bwrap is not found
    no_bwrap.mkdir()

    def check(**environ: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "toren.cli", "check", str(folder)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": str(no_bwrap), "LANG": "C.UTF-8", **environ},
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    refused = check()
    assert (
        f"! mcp server pry (stdio: {sys.executable} {PRYING}): could not reach it: McpJailError: "
        "a stdio MCP server runs inside bubblewrap, so it cannot read the worker's environment, "
        "and bubblewrap does not work here (bwrap is not installed); install bubblewrap"
    ) in refused
    assert "TOREN_MCP_UNCONFINED=1" in refused
    allowed = check(TOREN_MCP_UNCONFINED="1")
    assert f"mcp server pry (stdio: {sys.executable} {PRYING}): 1 tool(s)" in allowed


def test_a_value_found_only_by_its_name_must_look_like_a_secret() -> None:
    """Undeclared `*_PASSWORD=test` of a dev box turned `test` into a marker in every result of
    every agent (found in review): a name-only match needs 8 characters and no file path."""
    from toren.worker._loaded import worker_secrets

    held = worker_secrets(
        [],
        {
            "POSTGRES_PASSWORD": "test",
            "REDIS_PASSWORD": "redis",
            "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcp/key.json",
            "GITHUB_TOKEN": "ghp_0123456789",
            "TEMPORAL_API_KEY": "tk-1234",  # named outright: the redactor's own minimum applies
        },
    )
    assert "ghp_0123456789" in held and "tk-1234" in held
    assert not {"test", "redis", "/etc/gcp/key.json"} & set(held), held


@pytest.mark.parametrize(
    ("model", "environ", "hidden", "plain"),
    [
        (
            "bedrock/us.amazon.nova-micro-v1:0",
            {"AWS_REGION": "us-east-1", "AWS_SECRET_ACCESS_KEY": "aws-secret-1234",
             "BEDROCK_ENDPOINT_URL": "https://vpce-1.example"},
            {"AWS_SECRET_ACCESS_KEY", "BEDROCK_ENDPOINT_URL"},
            {"AWS_REGION"},
        ),
        (
            "vertex/gemini-2.5-flash",
            {"GOOGLE_CLOUD_PROJECT": "acme-analytics", "GOOGLE_CLOUD_LOCATION": "europe-west4",
             "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcp/sa.json"},
            set(),
            {"GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_APPLICATION_CREDENTIALS"},
        ),
        (
            "azure/gpt-4o",
            {"AZURE_OPENAI_ENDPOINT": "https://acme.openai.azure.com",
             "AZURE_OPENAI_API_KEY": "az-key-123456", "OPENAI_API_VERSION": "2025-04-01-preview"},
            {"AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"},
            {"OPENAI_API_VERSION"},
        ),
    ],
)  # fmt: skip
def test_a_providers_region_project_and_version_are_no_secrets(
    make_agent: Callable[..., Path],
    model: str,
    environ: dict[str, str],
    hidden: set[str],
    plain: set[str],
) -> None:
    """Found in review: `AWS_REGION=us-east-1` was redacted, so a tool asked about
    `us-east-1` ran with `[redacted]`; the same for a Vertex project and an API version."""
    from toren.worker.activities._runtime import AgentRuntime

    folder = make_agent(model=model)
    loaded = next(iter(AgentRuntime.load([folder], environ=environ).agents.values()))
    secrets = loaded.secrets(environ)
    assert hidden <= set(secrets), secrets
    assert not plain & set(secrets), secrets
    word = environ[sorted(plain)[0]]
    assert loaded.redactor().text(f"order {word}") == f"order {word}"
    # Declared by the agent itself, the same name is its secret again.
    declared = make_agent(model=model, env={"required": sorted(plain)}, name=f"{folder.name}_d")
    again = next(iter(AgentRuntime.load([declared], environ=environ).agents.values()))
    assert plain <= set(again.secrets(environ))


def test_an_aws_profile_the_worker_lacks_is_a_config_error(tmp_path: Path) -> None:
    from toren.errors import ConfigError
    from toren.worker.models._bedrock import bedrock_provider

    (tmp_path / "config").write_text("[profile ops]\nregion = eu-west-1\n")
    env = {"AWS_REGION": "us-east-1", "AWS_PROFILE": "opz"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        with pytest.raises(ConfigError, match=r"AWS_PROFILE='opz': no such profile"):
            bedrock_provider(env, timeout=5)
        assert bedrock_provider({**env, "AWS_PROFILE": "ops"}, timeout=5).region == "us-east-1"
