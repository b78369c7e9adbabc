"""The errors toren raises.

```
TorenError                  root of everything toren raises
├── ConfigError             a bad agent.yaml, tool file or `define_tool` call; lists every problem
│   └── MissingEnvError     declared env names missing from the worker's environment
└── RunError                a run ended by a budget or a deterministic mistake; a workflow
                            failure type, raised non-retryable so Temporal does not retry it
```
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.exceptions import ApplicationError

__all__ = ["ConfigError", "MissingEnvError", "RunError", "TorenError"]


class TorenError(Exception):
    """Root of every error toren raises."""


class ConfigError(TorenError):
    """A bad agent folder, agent.yaml or tool definition.

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


class RunError(TorenError, ApplicationError):
    """A run that ended on a budget or a deterministic mistake.

    An `ApplicationError` marked non-retryable, so it fails the workflow (never just the
    workflow task) and Temporal does not retry it. `kind` becomes the failure's type, e.g.
    `BudgetExceeded` or `ModelCallFailed`.
    """

    def __init__(self, message: str, kind: str = "RunError") -> None:
        ApplicationError.__init__(self, message, type=kind, non_retryable=True)
        self.kind = kind
