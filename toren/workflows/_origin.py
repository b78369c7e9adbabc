"""Where a run comes from and what it runs on: a fork's starting point, the Web UI's line on it.

`opening` is a new run's first messages (its prompt, a fork's or eval's start); `start_fork`
sets a fork's state from `RunInput.fork` (`toren.client.fork_run` wrote it);
`steps_before` is how many steps the budget does not count (a fork's budget is fresh);
`provenance` names the agent definition, the origin (a fork, an eval) and the Worker
Deployment Version, for the run's current details.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from toren.agent._types import RunInput, RunState
    from toren.workflows._input import naming_attachments

__all__ = ["headline", "opening", "provenance", "start_fork", "steps_before"]

Message = dict[str, Any]


def opening(run: RunState, input: RunInput) -> list[Message]:
    """A new run's first messages: those given, then the prompt (naming its attachments).

    A fork starts from its source's step (`start_fork`; its prompt, if any, is appended), an
    eval run records its source's calls in the state, where they travel across continue-as-new.
    """
    messages = list(input.messages or [])
    if input.fork is None or input.prompt:
        prompt = naming_attachments(input.prompt, input.attachments)
        messages.append({"role": "user", "content": prompt})
    if input.fork is not None:
        start_fork(run, input.fork, messages)
    if input.eval is not None:
        run.eval = {**input.eval, "position": 0}
    return messages


def start_fork(run: RunState, fork: dict[str, Any], opening: list[Message]) -> None:
    """Start where the source run's step `fork["step"]` started: its state and workspace.

    Nothing before that step runs again: the transcript (`opening`) holds its results. The call
    ids it used stay taken, so a new call with the same tool-use id gets its own id.
    """
    run.forked_from = {
        k: fork[k] for k in ("run_id", "step", "execution") if fork.get(k) is not None
    }
    run.step = int(fork["step"]) - 1
    run.state = dict(fork.get("state") or {})
    run.workspace = fork.get("workspace")
    taken = [c.get("id") for m in opening for c in m.get("tool_calls") or []]
    taken += [m.get("tool_call_id") for m in opening if m.get("role") == "tool"]
    run.call_ids = list(dict.fromkeys(str(i) for i in taken if i))


def steps_before(run: RunState) -> int:
    """Steps `maxStepsPerTask` does not count: a fork's source took them."""
    return int(run.forked_from["step"]) - 1 if run.forked_from else 0


def provenance(run: RunState) -> str:
    """`; agent sha256:...; forked from RUN at step N; on version NAME.BUILD` (what applies)."""
    spec = run.spec
    said = f"; agent {spec.digest}" if spec is not None and spec.digest else ""
    origin = run.forked_from
    if origin:
        said += f"; forked from {origin['run_id']} at step {origin['step']}"
        if origin.get("execution"):
            said += f" of execution {origin['execution']}"
    if run.eval:
        said += f"; eval of {run.eval.get('run_id')} (external tools never run)"
    version = workflow.info().get_current_deployment_version()
    if version is not None:
        said += f"; on version {version.to_canonical_string()}"
    return said


def headline(input: RunInput, run: RunState) -> str:
    """What a person sees first in the Web UI: which agent, asked what, how far, from where."""
    prompt = input.prompt.strip().splitlines()[0] if input.prompt.strip() else ""
    if len(prompt) > 160:
        prompt = prompt[:157] + "..."  # ASCII: see `Approvals.details`
    return (
        f"**{input.agent}**: {prompt}\n\n"
        f"step {run.step}, {run.tool_calls} tool calls, run {run.runs} of its chain"
        + provenance(run)
    )
