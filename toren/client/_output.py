"""A run's typed output as the caller's own pydantic model.

```python
class Verdict(BaseModel):
    verdict: Literal["refund", "deny"]
    amount: float | None = None

result = await toren_client.run_agent(client, "refunds", "Order A-1001?", output_type=Verdict)
result.output.verdict            # a Verdict; result.text is the raw JSON
answer = await toren_client.send_message(client, thread.id, "And A-1002?", output_type=Verdict)
answer["output"].verdict
```

The workflow has already validated the answer against the schema the agent recorded; this only
builds the caller's class from it, so a class that disagrees with the agent's schema is named.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from toren.agent._types import RunResult
from toren.errors import UsageError

__all__ = ["output_as", "typed_outcome", "typed_output"]

T = TypeVar("T")


def output_as(value: Any, output_type: type[T]) -> T:
    """`value` (a run's `output`) as an instance of the pydantic model `output_type`.

    Raises:
        UsageError: `output_type` is no pydantic model, or the output does not fit it.
    """
    from pydantic import BaseModel, ValidationError

    if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
        raise UsageError(f"output_type must be a pydantic model class, got {output_type!r}")
    try:
        return output_type.model_validate(value)
    except ValidationError as err:
        raise UsageError(
            f"the run's output does not fit {output_type.__name__} (does the agent's output: "
            f"or output_model: match it?): {err}"
        ) from None


def typed_output(result: RunResult, output_type: type[Any] | None) -> RunResult:
    """`result` with its `output` as an `output_type` (unchanged without one, or no output)."""
    if output_type is None or result.output is None:
        return result
    return dataclasses.replace(result, output=output_as(result.output, output_type))


def typed_outcome(outcome: dict[str, Any], output_type: type[Any] | None) -> dict[str, Any]:
    """A thread message's outcome with its `output` as an `output_type`."""
    if output_type is None or outcome.get("output") is None:
        return outcome
    return {**outcome, "output": output_as(outcome["output"], output_type)}
