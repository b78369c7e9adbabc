"""The `mcp_servers:` block of agent.yaml: MCP servers whose tools the agent may call.

```yaml
env:
  required: [TRACKER_TOKEN]
mcp_servers:
  files:                                  # the model sees files__read_file, ...
    command: [python, servers/files.py]   # a stdio server, started by the worker
    cwd: .                                # relative to the agent folder (the default)
    env: [TRACKER_TOKEN]                  # declared env names passed to the server
    effects: none                         # the contract of every tool of the server ...
    idempotency: none
    timeout_ms: 10000
  tracker:
    url: https://tracker.example.com/mcp  # a streamable HTTP server
    headers:
      Authorization: {env: TRACKER_TOKEN, prefix: "Bearer "}
    tools:                                # an allow-list; a mapping also sets contracts
      search: {}
      close_issue: {effects: external, approval: always, max_attempts: 1}
```

A header's value always comes from declared env: agent.yaml is committed, a token is not.
`AgentConfig` checks that every env name used here is declared under `env:`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from toren.agent._config_blocks import ENV_NAME, EnvName, checked_env_names
from toren.agent._problems import also_report

__all__ = ["McpContract", "McpHeader", "McpServerConfig", "env_names", "server_name_problem"]

_SERVER = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
"""Snake case without `__`, which separates the server from the tool in `<server>__<tool>`."""
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


class McpContract(BaseModel):
    """The durability contract of an MCP tool, as `define_tool` declares a toren tool's.

    Set on a server (every tool of it) or on one tool under `tools:`; a tool's own keys win.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    effects: Literal["none", "sandbox", "external"] | None = None
    """What the outside world sees of a call; default `external` (toren cannot know)."""
    idempotency: Literal["keyed", "none"] | None = None
    """`keyed` (default): the call's key is sent in `_meta` as `io.toren/idempotency_key`."""
    approval: Literal["never", "always"] | None = None
    """`always` gates every call on a person's decision; default `never`."""
    timeout_ms: int | None = Field(None, alias="timeoutMs", ge=1)
    """A call running longer returns an error result; default toren's tool timeout."""
    max_attempts: int | None = Field(None, alias="maxAttempts", ge=1)
    """Starts of one call (a dead server, a lost worker) before it fails closed."""


class McpHeader(BaseModel):
    """One HTTP header's value: `prefix` then the value of the declared env name `env`."""

    model_config = ConfigDict(extra="forbid")

    env: EnvName
    """A name declared under agent.yaml `env:`; its value is read on the worker."""
    prefix: str = ""
    """Text before the value, e.g. `"Bearer "`."""


class McpServerConfig(McpContract):
    """One entry of `mcp_servers:`: a stdio server (`command`) or a streamable HTTP one (`url`)."""

    command: list[str] | None = Field(None, min_length=1)
    """The program and its arguments; the worker runs it and talks to it over stdin/stdout."""
    cwd: str | None = None
    """Where `command` runs, relative to the agent folder; default the agent folder."""
    env: Annotated[list[str], AfterValidator(checked_env_names)] = Field(default_factory=list)
    """Declared env names whose values the stdio server gets (beside PATH, HOME and the like)."""
    url: str | None = None
    """The endpoint of a streamable HTTP server (`http://` or `https://`)."""
    headers: dict[str, McpHeader] = Field(default_factory=dict)
    """HTTP headers, each `{env: NAME, prefix: "..."}`: never a literal value."""
    tools: dict[str, McpContract | None] | None = None
    """The tools the agent may use (default all the server lists): a list of names, or a
    mapping from each name to its own contract keys."""

    @field_validator("tools", mode="before")
    @classmethod
    def _list_of_names(cls, tools: Any) -> Any:
        if isinstance(tools, list) and all(isinstance(t, str) for t in tools):
            return dict.fromkeys(tools)
        return tools

    @field_validator("headers", mode="wrap")
    @classmethod
    def _no_literals(cls, headers: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(headers, dict):
            return handler(headers)
        problems = []
        checked = {}
        for name, value in headers.items():
            if not isinstance(name, str) or not _HEADER.match(name):
                problems.append(f"{name!r} is not an HTTP header name")
            elif not isinstance(value, dict):
                problems.append(
                    f"{name}: a literal value is not allowed here (agent.yaml is no place for "
                    f"a secret); write {name}: {{env: NAME, prefix: ...}} with NAME declared "
                    "under env"
                )
            else:
                checked[name] = value
        # The well-formed ones are validated too, so their own mistakes come out in this pass.
        also_report(lambda: handler(checked), None, problems, headers)
        return handler(headers)

    @model_validator(mode="wrap")
    @classmethod
    def _one_transport(cls, data: Any, handler: ModelWrapValidatorHandler[McpServerConfig]) -> Any:
        # Read off the keys given, so a block with other mistakes hears this in the same pass.
        problems = []
        if isinstance(data, dict):
            stdio, http = data.get("command") is not None, data.get("url") is not None
            if stdio == http:
                problems.append("give exactly one of command: (a stdio server) or url: (HTTP)")
            for key in ("cwd", "env"):
                if http and data.get(key) is not None:
                    problems.append(f"{key}: is for a stdio server (command:), not url:")
            if stdio and data.get("headers") is not None:
                problems.append("headers: is for an HTTP server (url:), not command:")
            url = data.get("url")
            if isinstance(url, str) and not url.startswith(("http://", "https://")):
                problems.append(f"url: {url!r} must start with http:// or https://")
        return also_report(lambda: handler(data), None, problems, data)

    def allowed(self) -> list[str] | None:
        """The allow-listed tool names, or `None` for every tool the server lists."""
        return None if self.tools is None else list(self.tools)

    def env_used(self) -> list[str]:
        """The env names whose values this server gets: `env`, and each header's."""
        return [*self.env, *(h.env for h in self.headers.values())]

    def contract(self, tool: str) -> McpContract:
        """The contract of `tool`: its own keys over the server's."""
        own = (self.tools or {}).get(tool)
        keys = McpContract.model_fields
        merged = {k: getattr(self, k) for k in keys}
        if own is not None:
            merged.update({k: getattr(own, k) for k in keys if getattr(own, k) is not None})
        return McpContract(**merged)


def server_name_problem(name: str) -> str | None:
    """Why `name` cannot name a server, or `None`."""
    if not _SERVER.match(name):
        return (
            f"server name {name!r} must be snake_case without '__' ([a-z][a-z0-9]*(_[a-z0-9]+)*): "
            "the model sees its tools as <server>__<tool>"
        )
    return None


def env_names(server: Any) -> list[str]:
    """Every env name a server block (as read from YAML, maybe wrong) reads: `env`, headers'."""
    if not isinstance(server, dict):
        return []
    env, headers = server.get("env"), server.get("headers")
    names = list(env) if isinstance(env, list) else []
    if isinstance(headers, dict):
        names += [h.get("env") for h in headers.values() if isinstance(h, dict)]
    return [n for n in names if isinstance(n, str) and ENV_NAME.match(n)]
