"""Handoffs in a thread: the model calls `transfer_to_<agent>` and the conversation goes on as it.

```text
step 3  triage's model  → transfer_to_billing {"reason": "an invoice question"}
        tool result       "(handed off to billing: an invoice question)"
        spec              `toren.agent_spec("billing")`, recorded like any run's spec
step 4  billing's model → answers the same message (instructions, tools, model: billing's)
```

The call asks (`request_handoff`, in the turn); once the turn's calls are done the loop takes it
(`take_handoff`): it loads the target's spec and the same execution goes on with it, so the user
gets the target's answer to the message that was handed over. `RunState.agent` names the agent
from then on (every later run of the chain loads its spec) and `RunState.handoffs` records each
handoff. The new commands (the spec's local activity, the live item) are only on this path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec, ToolSpec
    from toren.agent._types import RunState
    from toren.errors import RunError

__all__ = ["mark_agents", "request_handoff", "take_handoff"]

Publish = Callable[[str, dict[str, Any]], None]


def _pending(run: RunState) -> dict[str, Any] | None:
    """The handoff this turn asked for and the loop has not taken yet."""
    last = run.handoffs[-1] if run.handoffs else None
    if last is None or last.get("at") is not None:
        return None
    if (last.get("execution"), last.get("step")) != (run.execution, run.step):
        return None  # asked in a turn that never ended (the thread was closed in it)
    return last


def request_handoff(run: RunState, tool: ToolSpec, args: dict[str, Any]) -> tuple[str, bool]:
    """A `transfer_to_<agent>` call: note the handoff for the turn's end; its result and error."""
    assert run.spec is not None
    target = run.spec.handoffs.get(tool.name)
    if target is None:
        return f"unknown tool: {tool.name}", True
    pending = _pending(run)
    if pending is not None:
        return (
            f"not handed off to {target}: this turn already hands the conversation to "
            f"{pending['to']}",
            True,
        )
    reason = str(args.get("reason", "")).strip()
    run.handoffs.append(
        {
            "from": run.spec.name,
            "to": target,
            "reason": reason,
            "execution": run.execution,
            "step": run.step,
            "at": None,
        }
    )
    return f"(handed off to {target}: {reason})", False


async def take_handoff(
    run: RunState, count: int, load_spec: Callable[[str], Awaitable[AgentSpec]], publish: Publish
) -> AgentSpec:
    """The spec the loop goes on with: the target's when this turn handed off, else the same.

    `count`: the transcript's length, from which the target answers. A target this worker
    cannot load leaves the conversation with the agent it was with, which is told why.
    """
    assert run.spec is not None
    pending = _pending(run)
    if pending is None:
        return run.spec
    try:
        spec = await load_spec(pending["to"])
    except RunError as err:
        run.handoffs.pop()
        run.notices.append(
            {
                "role": "user",
                "content": f"(toren: the handoff to {pending['to']} failed: {err.message}; "
                "you go on answering)",
            }
        )
        return run.spec
    pending["at"] = count
    run.spec, run.agent = spec, spec.name
    publish("handed_off", {k: pending[k] for k in ("from", "to", "reason")})
    return spec


def mark_agents(
    page: list[dict[str, Any]], start: int, home: str, handoffs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`page` (transcript messages from index `start`), each assistant one marked with `agent`.

    Only for a conversation that was handed off (the `messages` query): who wrote a message
    follows from where each handoff took effect (`at`).
    """
    taken = [(h["at"], str(h["to"])) for h in handoffs if h.get("at") is not None]
    marked = []
    for index, message in enumerate(page, start):
        if message.get("role") == "assistant":
            agent = home
            for at, to in taken:
                if at <= index:
                    agent = to
            message = {**message, "agent": agent}
        marked.append(message)
    return marked
