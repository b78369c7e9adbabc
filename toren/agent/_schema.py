"""JSON Schemas for tool input: derived from pydantic models, checked, and used to validate.

The schema a tool declares (a pydantic model or a JSON Schema dict) becomes the JSON Schema the
model sees. It is recorded once per run, so validating a model's arguments in the workflow only
needs this module's pure functions. A schema derived from a pydantic model closes its objects
(`additionalProperties: false`, unless the model says `extra="allow"`), so an argument the
model makes up is an invalid argument, not a key the handler silently never sees; a JSON Schema
dict keeps its own choice.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "check_schema", "input_schema", "validate_args"]

MAX_DEPTH = 7
"""Deepest nesting of objects and arrays the model providers accept."""


def input_schema(input: Any) -> dict[str, Any]:
    """Return the JSON Schema of a tool's `input` (a pydantic model class or a schema dict).

    Raises:
        TypeError: `input` is neither.
    """
    if input is None:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    if isinstance(input, dict):
        copied: dict[str, Any] = json.loads(json.dumps(input))
        return copied
    from pydantic import BaseModel

    if isinstance(input, type) and issubclass(input, BaseModel):
        schema = input.model_json_schema(schema_generator=_closed_objects())
        schema.pop("title", None)
        return schema
    raise TypeError(f"expected a pydantic model class or a JSON Schema dict, got {input!r}")


@functools.cache
def _closed_objects() -> type[Any]:
    """A pydantic schema generator that closes every model, dataclass and TypedDict.

    pydantic ignores unknown keys by default and says nothing of them in the schema, so the
    model is free to invent arguments that then vanish on the way to the handler.
    """
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

    def close(schema: JsonSchemaValue) -> JsonSchemaValue:
        # A model with `extra="allow"` already says `true` (and `check_schema` refuses it).
        if schema.get("type") == "object" and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema

    class ClosedObjects(GenerateJsonSchema):
        def model_schema(self, schema: Any) -> JsonSchemaValue:
            return close(super().model_schema(schema))

        def dataclass_schema(self, schema: Any) -> JsonSchemaValue:
            return close(super().dataclass_schema(schema))

        def typed_dict_schema(self, schema: Any) -> JsonSchemaValue:
            return close(super().typed_dict_schema(schema))

    return ClosedObjects


def check_schema(schema: dict[str, Any]) -> list[str]:
    """List what a provider would reject in `schema` (empty when it is fine)."""
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append('the top level must be an object schema ("type": "object")')
    try:
        from jsonschema.validators import validator_for

        validator_for(schema).check_schema(schema)
    except Exception as err:  # jsonschema.SchemaError, or a broken $ref
        problems.append(f"not a valid JSON Schema: {getattr(err, 'message', err)}")
        return problems
    defs = {**schema.get("$defs", {}), **schema.get("definitions", {})}
    _walk(schema, defs, path="", depth=0, problems=problems, seen=())
    return problems


def _walk(
    node: Any,
    defs: dict[str, Any],
    path: str,
    depth: int,
    problems: list[str],
    seen: tuple[str, ...],
) -> None:
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            problems.append(f"{path or '<root>'}: recursive schema via {ref!r} is not allowed")
            return
        if name in defs:
            _walk(defs[name], defs, path, depth, problems, (*seen, name))
        return
    nests = node.get("type") in ("object", "array") or "properties" in node or "items" in node
    if nests:
        depth += 1
        if depth > MAX_DEPTH:
            problems.append(
                f"{path or '<root>'}: nested deeper than {MAX_DEPTH} levels "
                "(flatten it, or take a JSON string and parse it in the handler)"
            )
            return
    extra = node.get("additionalProperties")
    if extra is True or extra == {}:
        problems.append(
            f"{path or '<root>'}: open-ended additionalProperties without a schema "
            "(give the values a type, e.g. dict[str, str])"
        )
    for key, sub in (node.get("properties") or {}).items():
        _walk(sub, defs, f"{path}.{key}" if path else key, depth, problems, seen)
    if isinstance(extra, dict):
        _walk(extra, defs, f"{path}[*]", depth, problems, seen)
    items = node.get("items")
    if isinstance(items, dict):
        _walk(items, defs, f"{path}[]", depth, problems, seen)
    for combinator in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in node.get(combinator) or []:
            _walk(sub, defs, path, depth, problems, seen)


def validate_args(schema: dict[str, Any], args: Any, *, indexed: bool = False) -> str | None:
    """Validate `args` against `schema`; return a short message, or `None` when valid.

    Pure and deterministic, so the workflow calls it directly. Each error names where it is:
    `items.0.qty`, or with `indexed` `items[0].qty` (how a typed output's errors read).
    """
    validator = _validator_for()(schema)(schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    parts = []
    for err in errors[:5]:
        where = _indexed(err.absolute_path) if indexed else ".".join(map(str, err.absolute_path))
        message = _unknown_keys(err) or err.message
        parts.append(f"{where}: {message}" if where else message)
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    text = "; ".join(parts) + more
    return text if len(text) <= 2000 else text[:2000] + "…"


def _indexed(path: Any) -> str:
    """`items[0].qty` for the path `items`, 0, `qty`."""
    where = ""
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}" if where else str(part)
    return where


@functools.cache
def _validator_for() -> Any:
    """`jsonschema`'s `validator_for`, imported on first use and then kept.

    Not at the top: the CLI would pay its 40 ms import for nothing. Not in `validate_args`:
    an import in workflow code goes through the sandbox's import hook, which adds an entry to
    that run's own set of checked modules (about 0.5 KB each run keeps while parked).
    """
    from jsonschema.validators import validator_for

    return validator_for


def _unknown_keys(err: Any) -> str | None:
    """`unknown argument 'ref' (allowed: a, b)` for an `additionalProperties: false` error."""
    if err.validator != "additionalProperties" or err.validator_value is not False:
        return None
    if not isinstance(err.instance, dict):
        return None
    known = err.schema.get("properties") or {}
    patterns = list(err.schema.get("patternProperties") or {})
    unknown = [
        key
        for key in err.instance
        if key not in known and not any(re.search(p, key) for p in patterns)
    ]
    if not unknown:
        return None
    noun = "argument" if len(unknown) == 1 else "arguments"
    allowed = ", ".join(known) or "none"
    return f"unknown {noun} {', '.join(map(repr, unknown))} (allowed: {allowed})"
