"""An eval run's tool calls, answered by what their `effects` allow (`RunInput.eval`).

An eval re-runs a recorded run's prompt with a changed agent. Its `external` tools are never
executed: a call is answered from the recorded run when the record has it at that point, else
it has diverged. Its gated calls are decided as the recorded run's person decided them, else
they would have asked a person, and nobody is asked. `none` and `sandbox` tools run as usual
(a sandbox call the record has runs over the workspace the recorded call started from).

"At that point": the record's calls are in the order the recorded run made them; `position`
is one past the last recorded call this run was answered with (0 at the start). A call matches
the first recorded call of the same tool with the same arguments at or after `position`, and
the match moves `position` past it. So a call the recorded run made later still matches after
the candidate skipped some, but no recorded call answers twice, nor one from before a call
that already matched. Matching happens before the call's first `await`, so a turn's calls
claim recorded calls in the order the model asked for them, on every replay.

Every answer is recorded in history as a memo upsert, `toren_eval_call` (only eval runs take
this path: a normal run's commands are unchanged), and `toren events` renders it as
`EvalAnswered` (and `ApprovalResolved` with `via: eval` for a recorded decision).
Deterministic, workflow-side code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from toren.agent._types import RunState
    from toren.errors import RunError

__all__ = ["EVAL_MEMO", "EvalRecord", "Recorded"]

EVAL_MEMO = "toren_eval_call"
"""The memo key each eval answer is upserted under (`toren.client._render_run` reads it)."""


@dataclass
class Recorded:
    """A recorded call this run's call matched."""

    index: int
    call: dict[str, Any]

    @property
    def decision(self) -> dict[str, Any] | None:
        """The recorded person's decision on it, when it was gated."""
        found = self.call.get("decision")
        return found if isinstance(found, dict) else None


class EvalRecord:
    """The recorded run an eval run's calls are answered from (`RunState.eval`)."""

    def __init__(self, run: RunState) -> None:
        assert run.eval is not None
        self._eval = run.eval

    @property
    def source(self) -> str:
        """The recorded run's id."""
        return str(self._eval.get("run_id", ""))

    def match(self, tool: str, args: dict[str, Any]) -> Recorded | None:
        """The first recorded call of `tool` with `args` at or after the position reached.

        Claims it: the position moves one past it. Synchronous, so call order decides.
        """
        calls: list[dict[str, Any]] = self._eval.get("calls") or []
        start = int(self._eval.get("position") or 0)
        for index in range(start, len(calls)):
            call = calls[index]
            if call.get("tool") == tool and _same(call.get("args"), args):
                self._eval["position"] = index + 1
                return Recorded(index, call)
        return None

    def diverged(self, call_id: str, tool: str, args: dict[str, Any]) -> str:
        """Record that `tool(args)` has no recorded answer; the error result the model sees.

        Raises:
            RunError: kind `Diverged`, under `on_diverge: stop`.
        """
        self.note(call_id, tool, "diverged")
        said = (
            f"eval: {tool}({_short(args)}) was not called at this point of the recorded run "
            f"{self.source}; an external tool never runs in an eval, so nothing ran"
        )
        if self._eval.get("on_diverge") == "stop":
            raise RunError(said, kind="Diverged")
        return said

    def would_ask(self, call_id: str, tool: str) -> str:
        """Record that this gated call would ask a person; the error result the model sees."""
        self.note(call_id, tool, "would_ask")
        return (
            f"eval: this call of {tool} would ask a person for approval, and the recorded run "
            f"{self.source} has no decision on it; nobody is asked in an eval, so nothing ran"
        )

    def note(
        self,
        call_id: str,
        tool: str,
        answer: str,
        recorded: Recorded | None = None,
        decided: bool = False,
    ) -> None:
        """Record in history how the call was answered.

        `answer`: `recorded`, `denied`, `executed`, `diverged` or `would_ask`; with `decided`,
        also the recorded decision taken without waiting.
        """
        body: dict[str, Any] = {"call_id": call_id, "tool": tool, "answer": answer}
        if recorded is not None:
            body["index"] = recorded.index
            if decided and recorded.decision is not None:
                body["decision"] = recorded.decision
        workflow.upsert_memo({EVAL_MEMO: body})


def _same(recorded: Any, args: dict[str, Any]) -> bool:
    """Whether two argument objects are the same JSON (key order aside)."""
    return bool(json.dumps(recorded, sort_keys=True) == json.dumps(args, sort_keys=True))


def _short(args: dict[str, Any]) -> str:
    text = json.dumps(args, ensure_ascii=False, sort_keys=True)[1:-1]
    return text if len(text) <= 160 else text[:157] + "..."
