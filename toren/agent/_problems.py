"""pydantic's validation errors in toren's words: one `ConfigError` line per problem.

```python
try:
    AgentConfig.model_validate(raw)
except ValidationError as err:
    describe(err, "support/agent.yaml", AgentConfig)
    # ["support/agent.yaml: unknown key 'limits.maxStepPerTask'; did you mean 'maxStepsPerTask'?",
    #  "support/agent.yaml: limits.maxWallClockMin: must be greater than 0, got -1"]
```

Every line names the file and the key path; an unknown key gets the closest key accepted at
its level, found with `difflib`.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

__all__ = ["also_report", "describe", "did_you_mean", "problems_at"]

T = TypeVar("T")

_OWN = "toren"
"""The error type of problems raised with `problems_at`: their message is already ours."""

_PYDANTIC_TYPES = frozenset(get_args(ErrorType))
"""Error types pydantic itself can raise again by name."""

_SAYS = {
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "model_type": "must be a block of keys",
    "model_attributes_type": "must be a block of keys",
}
"""pydantic error types whose own message reads badly in a YAML file."""


def describe(err: ValidationError, where: str | Path, model: type[BaseModel]) -> list[str]:
    """One line per error in `err`: `<where>: <key path>: <what is wrong>`.

    Args:
        err: What `model.model_validate` raised.
        where: The file (and place in it) the validated data came from.
        model: The validated model, to find the keys accepted where an unknown one stands.
    """
    lines: list[str] = []
    for error in err.errors():
        loc = error["loc"]
        key = _key_path(loc)
        if error["type"] == "extra_forbidden":
            hint = did_you_mean(str(loc[-1]), *_keys_at(model, loc[:-1]))
            lines.append(f"{where}: unknown key {key!r}{hint}")
        elif error["type"] == "missing":
            lines.append(f"{where}: missing key {key!r}")
        else:
            lines.append(f"{where}: {key + ': ' if key else ''}{_message(error)}")
    return lines


def did_you_mean(word: str, known: Sequence[str], spellings: Sequence[str] = ()) -> str:
    """`; did you mean 'x'?` for the closest of `known`, else ` (known: a, b)`, else ``.

    Args:
        word: What the user wrote.
        known: The names to list when none is close.
        spellings: Other accepted spellings of `known`, matched too.
    """
    close = difflib.get_close_matches(word, [*known, *spellings], n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(known))})" if known else ""


def problems_at(key: str | None, messages: Sequence[str], value: Any) -> ValidationError:
    """Several problems for a validator to raise as separate errors.

    A validator that raises `ValueError` reports one problem; raising this reports each of
    `messages` on its own line, at the validated field (`.<key>` below it, if given).
    """
    return ValidationError.from_exception_data(key or "problems", _details(key, messages, value))


def also_report(
    validate: Callable[[], T], key: str | None, messages: Sequence[str], value: Any
) -> T:
    """Run `validate` (a wrap validator's `handler(...)`) and report `messages` with its errors.

    For a check that must not wait until the rest of a block is right: the block's own
    errors and these come out together, in one pass.
    """
    mine = _details(key, messages, value)
    try:
        result = validate()
    except ValidationError as err:
        theirs = [_detail(e) for e in err.errors()]
        raise ValidationError.from_exception_data(err.title, [*theirs, *mine]) from None
    if mine:
        raise ValidationError.from_exception_data(key or "problems", mine)
    return result


def _details(key: str | None, messages: Sequence[str], value: Any) -> list[InitErrorDetails]:
    loc = (key,) if key else ()
    return [
        InitErrorDetails(type=PydanticCustomError(_OWN, message), loc=loc, input=value)
        for message in messages
    ]


def _detail(error: ErrorDetails) -> InitErrorDetails:
    """`error` as it can be raised again."""
    kind: str | PydanticCustomError = error["type"]
    if kind not in _PYDANTIC_TYPES:
        kind = PydanticCustomError(error["type"], error["msg"])
    return InitErrorDetails(
        type=kind, loc=error["loc"], input=error["input"], ctx=error.get("ctx", {})
    )


def _key_path(loc: Sequence[int | str]) -> str:
    """`("limits", "maxStepsPerTask")` → `limits.maxStepsPerTask`; list indexes as `[0]`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _message(error: ErrorDetails) -> str:
    if error["type"] == _OWN:
        return error["msg"]
    if error["type"] == "value_error":
        return str((error.get("ctx") or {}).get("error", error["msg"]))
    says = _SAYS.get(error["type"]) or error["msg"].replace("Input should be", "must be", 1)
    return f"{says}, got {error['input']!r}"


def _keys_at(model: type[BaseModel], path: Sequence[int | str]) -> tuple[list[str], list[str]]:
    """The keys `model` documents at `path` (aliases), and the other spellings it accepts."""
    annotation: Any = model
    for part in path:
        annotation = _model_or_container(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {f.alias or name: f for name, f in annotation.model_fields.items()}
            field = fields.get(str(part)) or annotation.model_fields.get(str(part))
            if field is None:
                return [], []
            annotation = field.annotation
        elif get_origin(annotation) in (dict, list):
            annotation = get_args(annotation)[-1]  # `part` is a mapping's key or a list's index
        else:
            return [], []
    annotation = _model_or_container(annotation)
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return [], []
    keys = [f.alias or name for name, f in annotation.model_fields.items()]
    names = annotation.model_fields if annotation.model_config.get("populate_by_name") else {}
    return keys, [name for name in names if name not in keys]


def _model_or_container(annotation: Any) -> Any:
    """`X | None` → `X`: the arm of a union that has keys of its own."""
    if get_origin(annotation) in (Union, types.UnionType):
        for arm in get_args(annotation):
            if get_origin(arm) in (dict, list) or (
                isinstance(arm, type) and issubclass(arm, BaseModel)
            ):
                return arm
    return annotation
