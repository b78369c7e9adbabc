"""The errors toren raises, in one tree, grouped the way callers catch them.

```
TorenError                  root of everything toren raises to a user
├── ConfigError             a bad agent.yaml, tool file, `define_tool` call or toren setting in the
│   │                       worker's environment; lists every problem, each naming the file and key
│   └── MissingEnvError     declared env names missing from the worker's environment
├── ModelError              a model provider failed
│   └── ModelHTTPError      the provider answered an error status or could not be reached;
│       │                   `retryable` and `retry_after` tell Temporal what to do
│       └── PromptTooLongError  the prompt does not fit the model's context window: compact
│                           it and call again (never retried as it is)
├── ToolError               a built-in tool refused a call; the model reads the message
│   ├── WebSearchError      the search service refused or answered nonsense
│   ├── SqlQueryError       the query was refused or failed
│   └── SandboxError        a workspace path or command the model got wrong
├── UsageError              a call to toren's API with a wrong argument (also a ValueError)
├── ApprovalWaitError       `wait_for_approval` saw no waiting call in time, or the run closed
├── QuestionExpired         nobody answered a tool's `ctx.ask` in time (raised in the handler)
├── UndecodablePayloadError a payload is encoded (encrypted) by a codec this process lacks;
│                           names the setting; `accepted` when the action took effect first
├── CodecServerError        the team's codec server did not answer or refused
├── StoreError              the store (`TOREN_STORE`) cannot store or find something
│   ├── StoreMissing        the key is not in the store (also a KeyError)
│   └── AttachmentError     a file cannot be attached or an attachment cannot be read
└── RunError                a run ended by a budget or a deterministic mistake; a workflow
                            failure type, raised non-retryable so Temporal does not retry it
```

```python
try:
    runtime = AgentRuntime.load(["examples/support"], os.environ)
except toren.ConfigError as err:
    print(err)            # every problem at once
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.exceptions import ApplicationError

__all__ = [
    "ApprovalWaitError",
    "AttachmentError",
    "CodecServerError",
    "ConfigError",
    "InvalidJSONPayloadError",
    "MissingEnvError",
    "ModelError",
    "ModelHTTPError",
    "PromptTooLongError",
    "QuestionExpired",
    "RunError",
    "SandboxError",
    "SqlQueryError",
    "StoreError",
    "StoreMissing",
    "ToolError",
    "TorenError",
    "UndecodablePayloadError",
    "UsageError",
    "WebSearchError",
]


class TorenError(Exception):
    """Root of every error toren raises."""


# -- configuration ----------------------------------------------------------------------------


class ConfigError(TorenError):
    """A bad agent folder, agent.yaml, tool definition or toren setting in the environment.

    Carries every problem found, each naming the file and the key, so one run of
    `toren check` shows everything to fix.
    """

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            message = f"{len(self.problems)} problems:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(message)


class MissingEnvError(ConfigError):
    """Declared env variables missing from the worker's environment (names only, never values)."""

    def __init__(self, agent: str, names: Sequence[str]) -> None:
        self.agent = agent
        self.names = sorted(names)
        super().__init__(
            f"agent {agent!r} is missing required env: {', '.join(self.names)} "
            "(set them in the worker's environment; they are never passed in a run's input)"
        )


# -- model providers ----------------------------------------------------------------------------


class ModelError(TorenError):
    """A model provider failed to answer."""


class ModelHTTPError(ModelError):
    """A provider answered with an error status (or could not be reached).

    `retryable` follows the status: 408, 409, 429 and 5xx (and connection errors) are; other
    4xx are not. `retry_after` is the server's `Retry-After` in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        if retryable is None:
            retryable = status is None or status in (408, 409, 429) or status >= 500
        self.retryable = retryable


class PromptTooLongError(ModelHTTPError):
    """The provider refused the prompt for its length: it does not fit the context window.

    Not retryable (the same prompt is refused again): the caller compacts the conversation and
    calls again. `window` and `prompt_tokens` are the sizes in tokens the refusal stated, when
    it stated them (`toren.worker.models._window.refusal_for` reads each provider's wording).
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        window: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        super().__init__(message, status=status, retryable=False)
        self.window = window
        self.prompt_tokens = prompt_tokens


# -- tools ------------------------------------------------------------------------------------


class ToolError(TorenError):
    """A built-in tool refused or failed a call; its message is what the model reads."""


class WebSearchError(ToolError):
    """The search service refused the search or answered with something that is no result."""


class SqlQueryError(ToolError):
    """The query was refused or failed; the message carries the database's own words."""


class SandboxError(ToolError):
    """A sandbox tool call the model got wrong; the message says how to fix it."""


class UsageError(TorenError, ValueError):
    """A call to toren's API (client, CLI) with a wrong argument; the message says the fix."""


class ApprovalWaitError(TorenError):
    """No call of the run waited for a decision in time, or the run closed before one did.

    Raised by `toren.client.wait_for_approval`; the message names the run and what it did.
    """


class QuestionExpired(TorenError):
    """Nobody answered a question a tool asked with `ctx.ask` before it expired.

    Raised inside the handler, by `ctx.ask`, on the handler's run after the expiry; a handler
    that does not catch it fails with it, and the model reads why.
    """


# -- the team's codec ---------------------------------------------------------------------------


class InvalidJSONPayloadError(TorenError, ValueError):
    """A `json/plain` payload that is no JSON toren's converter can read.

    Malformed, or nested past pydantic's limit of about 200 levels. Reading it again never
    succeeds, so `AgentRun` and `AgentThread` list it among their failure exception types: a
    start whose input is such a payload fails the run at once instead of failing its first
    workflow task on every retry.
    """


class UndecodablePayloadError(TorenError):
    """A payload in an encoding no converter here reads: the team's codec is missing.

    The message is one line naming the settings that fix it (`toren.connect._codec`). `accepted` is
    true when the action that met it (a decision, a message) took effect first, and only its
    answer could not be read.
    """

    def __init__(self, encoding: str, *, accepted: bool = False, configured: bool = False) -> None:
        """Create the error for a payload of `encoding`.

        Args:
            encoding: the payload's `encoding` metadata.
            accepted: the action took effect; only its answer is unreadable.
            configured: a codec is set here, and it left the payload as it was.
        """
        what = "encrypted" if "encrypt" in encoding.lower() else "encoded by a payload codec"
        if configured:
            fix = (
                "the codec set here (TOREN_PAYLOAD_CODEC, TEMPORAL_CODEC_ENDPOINT or the "
                "profile's codec) did not decode them: is it the team's, with its key?"
            )
        else:
            fix = (
                "set TEMPORAL_CODEC_ENDPOINT (or --codec-endpoint, or codec.endpoint in the "
                "temporal.toml profile) to the team's codec server, or "
                "TOREN_PAYLOAD_CODEC=module:attribute (or --codec) to its codec"
            )
        super().__init__(f"payloads in this namespace are {what} ({encoding}): {fix}")
        self.encoding = encoding
        self.accepted = accepted


class CodecServerError(TorenError):
    """The team's codec server (`TEMPORAL_CODEC_ENDPOINT`) did not answer or refused."""


# -- stores -----------------------------------------------------------------------------------


class StoreError(TorenError):
    """The store (`TOREN_STORE`) cannot store or find something.

    A tool call that meets one fails as a retryable activity failure.
    """


class StoreMissing(StoreError, KeyError):
    """The key is not in the store; the message says which and where."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "missing"


class AttachmentError(StoreError):
    """A file cannot be attached or an attachment cannot be read; the message says why."""


# -- runs -------------------------------------------------------------------------------------


class RunError(TorenError, ApplicationError):
    """A run that ended on a budget or a deterministic mistake.

    An `ApplicationError` marked non-retryable, so it fails the workflow (never just the
    workflow task) and Temporal does not retry it. `kind` becomes the failure's type, e.g.
    `BudgetExceeded` or `ModelCallFailed`.
    """

    def __init__(self, message: str, kind: str = "RunError", *details: Any) -> None:
        ApplicationError.__init__(self, message, *details, type=kind, non_retryable=True)
        self.kind = kind
