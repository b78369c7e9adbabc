"""agent.yaml's typed final output: `output:`, `output_model:` and `output_mode:`, checked.

```yaml
output:                       # a JSON Schema the final answer must match
  type: object
  properties: {verdict: {type: string, enum: [refund, deny]}, amount: {type: number}}
  required: [verdict]
# or: output_model: answer:Verdict   (a pydantic model in answer.py beside agent.yaml)
output_mode: auto             # auto | native | tool | prompted
limits: {maxOutputRetries: 2}
```

The worker resolves `output_model` (`toren.worker._agent`) and records the schema in the run's
`AgentSpec`; the workflow validates the answer against it (`toren.workflows._output`), and the
model call asks for it the way its provider can (`toren.worker.models._output`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FINAL_OUTPUT_TOOL",
    "OUTPUT_MODES",
    "model_output_schema",
    "output_mode_checked",
    "output_schema_checked",
]

FINAL_OUTPUT_TOOL = "final_output"
"""The tool the model answers through in `tool` mode; an agent's own tool may not take it."""

OUTPUT_MODES = ("auto", "native", "tool", "prompted")
"""`output_mode:` values."""


def output_schema_checked(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """`schema` when it is a valid JSON Schema (any type; an object is what providers like).

    Raises:
        ValueError: it is not one, with jsonschema's reason.
    """
    if schema is None:
        return None
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except Exception as err:  # jsonschema.SchemaError, or a broken $ref
        raise ValueError(f"not a valid JSON Schema: {getattr(err, 'message', err)}") from None
    return schema


def output_mode_checked(mode: str, data: dict[str, Any], partial: bool) -> str:
    """`mode` when the agent can use it: `native` needs an OpenAI-compatible model.

    `data` holds the agent's keys validated so far; `partial`: the config is being rebuilt
    from the keys that validated, and these checks already ran.

    Raises:
        ValueError: the mode does not fit the model, or there is no output to ask for.
    """
    if partial or mode == "auto":
        return mode
    # A key that failed its own check is absent from `data` (and already reported).
    given = [data[k] for k in ("output", "output_model") if k in data]
    if len(given) == 2 and given == [None, None]:
        raise ValueError(f"{mode!r} needs output: or output_model: to ask for; add one")
    provider = str(data.get("model", "")).partition("/")[0]
    if mode == "native" and provider in ("anthropic", "bedrock"):
        api = "Anthropic's API" if provider == "anthropic" else "Bedrock's Converse API"
        raise ValueError(
            f"'native' is OpenAI's response_format, which {api} does not take; use "
            f"'tool' (the default for {provider}/ models) or 'prompted'"
        )
    return mode


def model_output_schema(model: Any) -> tuple[dict[str, Any], str]:
    """The JSON Schema and name of a pydantic model class, as `output_model:` records them.

    Raises:
        TypeError: `model` is not a pydantic model class.
    """
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"is not a pydantic model class (got {model!r})")
    schema = model.model_json_schema()
    return schema, model.__name__
