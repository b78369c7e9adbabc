"""Generated agent folders whose tools count their executions in a file outside Temporal.

Each execution of a tool handler appends JSON lines to `FAULTS_RECORD` (declared env):
`{"run_id", "call_id", "idempotency_key", "attempt", "phase", "pid", "t", "tool"}` with
phase `start` when the handler begins and `end` just before it returns. Lines are written with
one `os.write` on an O_APPEND descriptor and fsynced, so lines from concurrent workers never
interleave and a line written before a SIGKILL is in the file afterwards.

A handler sleeps `ctx.arguments[args["which"]]` seconds (the run's invocation arguments), so
the harness chooses every call's duration per run while the agent's script stays fixed.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Record", "read_records", "write_agent", "WORK_TOOL", "GATED_TOOL"]

_RECORDER = """
import json
import os
import time


def record(ctx, phase, tool):
    line = json.dumps({
        "run_id": ctx.run_id, "call_id": ctx.call_id, "idempotency_key": ctx.idempotency_key,
        "attempt": ctx.attempt, "phase": phase, "pid": os.getpid(), "t": time.time(),
        "tool": tool,
    })
    fd = os.open(ctx.env["FAULTS_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
"""

WORK_TOOL = (
    _RECORDER
    + """
from toren import define_tool


def work(args, ctx):
    record(ctx, "start", "work")
    time.sleep(float(ctx.arguments.get(args["which"], 0.5)))
    record(ctx, "end", "work")
    return f"{ctx.call_id} ok"


tool = define_tool(
    description="Do some external work that takes a while.",
    input={"type": "object", "properties": {"which": {"type": "string"}}, "required": ["which"]},
    effects="external",
    idempotency="keyed",
    max_attempts=MAX_ATTEMPTS,
    handler=work,
)
"""
)
"""A keyed external tool that sleeps the run's `arguments[which]` seconds."""

GATED_TOOL = (
    _RECORDER
    + """
from toren import define_tool


def gated(args, ctx):
    record(ctx, "start", "gated")
    record(ctx, "end", "gated")
    return "gated ran"


tool = define_tool(
    description="Something a person must approve first.",
    effects="external",
    idempotency="keyed",
    approval="always",
    max_attempts=MAX_ATTEMPTS,
    handler=gated,
)
"""
)
"""A keyed external tool gated by `approval="always"`."""


def write_agent(
    folder: Path,
    name: str,
    *,
    tools: dict[str, str],
    script: list[Any] | None = None,
    model: str = "mock/scripted",
    max_attempts: int = 3,
    env_optional: dict[str, str] | None = None,
) -> Path:
    """Write an agent folder named `name` under `folder`; return its path.

    `tools` maps tool names to sources (the `MAX_ATTEMPTS` placeholder is filled in); the
    scripted model plays `script` when `model` is `mock/scripted`.
    """
    path = folder / name
    (path / "tools").mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "name": name,
        "model": model,
        "maxTokens": 256,
        "env": {"required": ["FAULTS_RECORD"], "optional": dict(env_optional or {})},
        # A runaway script must end the run rather than loop until the harness times out.
        "limits": {"maxStepsPerTask": 10},
    }
    (path / "agent.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (path / "instructions.md").write_text("You are a fault-injection test agent.\n")
    if script is not None:
        (path / "mock_script.yaml").write_text(yaml.safe_dump(script, sort_keys=False))
    for tool, source in tools.items():
        text = textwrap.dedent(source).replace("MAX_ATTEMPTS", str(max_attempts))
        (path / "tools" / f"{tool}.py").write_text(text)
    return path


@dataclass(frozen=True)
class Record:
    """One line of a record file: a handler reached `phase` in process `pid`."""

    run_id: str
    call_id: str
    idempotency_key: str
    attempt: int
    phase: str
    pid: int
    t: float
    tool: str

    @property
    def call(self) -> tuple[str, str]:
        """The call's identity: (run id, tool-use id)."""
        return (self.run_id, self.call_id)


def read_records(path: Path) -> list[Record]:
    """Every line of the record file at `path`, in file order (empty if it does not exist)."""
    if not path.exists():
        return []
    # A line still being appended has no newline yet: leave it for the next read.
    *complete, _partial = path.read_text().split("\n")
    return [Record(**json.loads(line)) for line in complete if line.strip()]
