"""A typed final answer: parsed, validated against the recorded schema, or sent back.

An agent with `output:` (`AgentSpec.output_schema`) ends its run only on a final answer that is
JSON matching the schema. One that does not goes back to the model as a user message naming the
errors, up to `limits.maxOutputRetries` times (counted in `RunState.output_retries`); the next
model call is an ordinary step of the loop. Then the run fails with `InvalidOutput`. Pure and
deterministic: no command of its own, and nothing at all for an agent without `output:`.

The refusal's message carries `output_rejected: {"errors", "attempt"}`, which the next model
call's input records in history: `toren events` shows it as `OutputRejected`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from toren.agent._schema import validate_args
from toren.agent._spec import AgentSpec
from toren.agent._transcript import TranscriptRef
from toren.agent._types import RunResult, RunState
from toren.errors import RunError

__all__ = ["OUTPUT_REJECTED", "final_result", "output_item", "parse_output"]

OUTPUT_REJECTED = "output_rejected"
"""The key of a refusal message that says what was wrong: `{"errors", "attempt"}`."""

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.DOTALL)
"""A reply wrapped in a Markdown code fence (```json ... ```), which models like to write."""


def parse_output(text: str) -> tuple[Any, str | None]:
    """The JSON value in `text` (a code fence around it is fine), or why there is none."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        return None, "the answer is empty; it must be JSON"
    try:
        return json.loads(body), None
    except ValueError as err:
        return None, f"not valid JSON ({err})"


def final_result(
    spec: AgentSpec, run: RunState, transcript: TranscriptRef, message: dict[str, Any]
) -> RunResult | None:
    """The run's result for the final answer `message`, or None when it went back to the model.

    Without `spec.output_schema` every answer is final (`output` None). With one, an answer
    that does not match is appended to `transcript` as a refusal, and None says: call again.

    Raises:
        RunError: kind `InvalidOutput`, once `spec.max_output_retries` refusals are used up.
    """
    text = str(message.get("content") or "")
    output = None
    if spec.output_schema is not None:
        output, problem = parse_output(text)
        if problem is None:
            problem = validate_args(spec.output_schema, output, indexed=True)
        if problem is not None:
            _refuse(spec, run, transcript, problem)
            return None
        run.output_retries = 0
    return RunResult(
        text=text,
        steps=run.step,
        tool_calls=run.tool_calls,
        usage=dict(run.usage),
        cost_usd=round(run.cost_usd, 6) if spec.prices else None,
        output=output,
    )


def output_item(result: RunResult) -> dict[str, Any]:
    """What a `run_completed` live item (or a thread message's outcome) adds: the `output`."""
    return {} if result.output is None else {"output": result.output}


def _refuse(spec: AgentSpec, run: RunState, transcript: TranscriptRef, problem: str) -> None:
    attempt = run.output_retries + 1
    if run.output_retries >= spec.max_output_retries:
        run.output_retries = 0
        tries = f"{attempt} answer" + ("s" if attempt > 1 else "")
        raise RunError(
            f"the final answer did not match the output schema after {tries}: {problem}",
            kind="InvalidOutput",
        )
    run.output_retries = attempt
    refusal = {
        "role": "user",
        "content": f"(toren: your final answer did not match the output schema: {problem}; "
        "answer again with JSON that matches it)",
        OUTPUT_REJECTED: {"errors": problem, "attempt": attempt},
    }
    transcript.append(refusal, {"message": refusal})
