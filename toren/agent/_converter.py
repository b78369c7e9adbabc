"""toren's payload converter: Temporal's pydantic converter, with type adapters built once.

`temporalio.contrib.pydantic`'s converter caches a `TypeAdapter` per type hint, but the cache
lives on the converter instance, and a worker builds a new payload converter for every
workflow run (`DataConverter._new_payload_converter`, called as each run's sandbox starts):
every run rebuilt the adapters of `RunState`, `AgentSpec`, `ModelCallResult`, ... (pydantic
schema generation, about 5% of a busy worker's CPU). Here the adapters of toren's and
Temporal's own types (the live stream's `PublishInput`, say), and of builtins and `typing` forms
over them, live in one cache shared by every instance.

Only those: a type defined in a module the sandbox re-imports per run is a new class object
each run, so sharing its adapter would keep every run's copy alive. toren's modules are passed
through the sandbox (`toren.connect._plugin.PASSTHROUGH`), and `temporalio` always is, so their
classes are the same objects in every run, and an adapter is read-only once built (validating is
all it does here).

An agent's spec is decoded once per distinct payload, too (`decoded_once`): every run of an
agent records the same spec, and workflow code only reads it, so runs of one agent share one
`AgentSpec` instead of holding a copy each (~5 KB for an agent of one tool, more with every
tool's schema).
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, DefaultPayloadConverter, JSONPlainPayloadConverter

from toren.agent._sdk_private import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from toren.errors import InvalidJSONPayloadError

__all__ = [
    "SHARED_MODULES",
    "TorenPayloadConverter",
    "data_converter",
    "decoded_once",
    "omit_defaults",
]

SHARED_MODULES = ("toren", "temporalio", "builtins", "typing")
"""Modules (and their children) whose types get a shared adapter: ones the sandbox passes
through unrestricted, so a type of theirs is one object for every run (a restricted standard
module such as `datetime` may reach a run as a per-run proxy: left to the per-run cache)."""

_MAX_SHARED = 512
"""Shared adapters kept (least recently used go first): toren has a few dozen types."""
_MAX_OWN = 1024
"""Adapters of other hints one converter keeps (the SDK's default)."""
_MAX_VALUES = 256
"""Shared values kept (least recently used go first): a worker serves a few agents."""


_DECODED_ONCE: set[type] = set()
"""Types decoded once per distinct payload (see `decoded_once`)."""
_OMIT_DEFAULTS: set[type] = set()
"""Types written without their fields that hold the default (see `omit_defaults`)."""

T = typing.TypeVar("T")


def omit_defaults(cls: type[T]) -> type[T]:
    """Class decorator: write `cls` without the fields that hold their default.

    For the activity inputs and results written once per turn, most of whose optional fields
    are unset: `"arguments":null,"attachments":null,...` was a tenth of the bytes a turn adds
    to history. Decoding gives the defaults back, so a payload written before this reads the
    same. Only the dataclass's own fields are left out; a `null` inside a dict field (a tool's
    arguments) stays.
    """
    _OMIT_DEFAULTS.add(cls)
    return cls


def decoded_once(cls: type[T]) -> type[T]:
    """Class decorator: decode `cls` once per distinct payload and share the value.

    For a frozen type that no code changes once decoded: every run that asks for the same
    payload gets the same object, so a cached run holds no copy of its own.
    """
    _DECODED_ONCE.add(cls)
    return cls


@functools.lru_cache(maxsize=_MAX_SHARED)
def _shared_adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


@functools.lru_cache(maxsize=_MAX_VALUES)
def _shared_value(hint: Any, data: bytes) -> Any:
    return _shared_adapter(hint).validate_json(data)


@functools.lru_cache(maxsize=_MAX_SHARED)
def _shareable(hint: Any) -> bool:
    """Whether every type `hint` names comes from `SHARED_MODULES`."""
    if hint is Any or hint is None or hint is type(None):
        return True
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is not None:
        # `list[X]`, `dict[str, X]`, `X | None`, `Optional[X]`, `Annotated[X, ...]`, ...
        parts = [origin, *args]
        if origin is typing.Annotated:
            parts = [args[0]] if args else []
        return all(_shareable(p) for p in parts if not isinstance(p, (str, int, float)))
    if isinstance(hint, types.UnionType):
        return all(_shareable(a) for a in args)
    module = getattr(hint, "__module__", None)
    if not isinstance(module, str):
        return False
    return any(module == m or module.startswith(f"{m}.") for m in SHARED_MODULES)


class _SharedAdapters(PydanticJSONPlainPayloadConverter):
    """The pydantic JSON converter, taking adapters of shareable hints from the shared cache.

    Built for every workflow activation and completion (the SDK makes a data converter for
    each), so its `__init__` does no more than it needs: no serializer options (toren sets
    none), an empty cache of its own for the hints it cannot share.
    """

    def __init__(self) -> None:
        self._to_json_options = None

    @functools.cached_property  # settable, as the base class's attribute is (its `__setstate__`)
    def _type_adapter(  # type: ignore[override]
        self,
    ) -> functools._lru_cache_wrapper[TypeAdapter[Any]]:
        """The cache of adapters for hints it cannot share, made on first use.

        toren's own payloads never need it, and every cached run keeps its converter: made
        eagerly, the `lru_cache` wrapper (with its copy of `TypeAdapter`'s attributes) was
        about 1.3 KB of each parked run.
        """
        return functools.lru_cache(maxsize=_MAX_OWN)(TypeAdapter)

    def to_payload(self, value: Any) -> Payload | None:
        """Encode `value` as JSON (see the base class, and `omit_defaults`)."""
        cls: Any = type(value)
        if cls not in _OMIT_DEFAULTS:
            return super().to_payload(value)
        data = _shared_adapter(cls).dump_json(value, exclude_defaults=True)
        return Payload(metadata={"encoding": self.encoding.encode()}, data=data)

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        """Decode `payload` as `type_hint` (see the base class).

        Raises:
            InvalidJSONPayloadError: the payload is no JSON (or nests too deep to read).
        """
        try:
            return self._decode(payload, type_hint)
        except ValidationError as err:
            if any(e["type"] != "json_invalid" for e in err.errors()):
                raise  # JSON that does not fit the hint: the caller's to say
            [first, *_] = err.errors()
            raise InvalidJSONPayloadError(
                f"a payload is no JSON toren can read ({first['msg']}; at most about 200 "
                "levels of nesting)"
            ) from None

    def _decode(self, payload: Payload, type_hint: type | None) -> Any:
        hint = type_hint if type_hint is not None else Any
        try:
            shared = _shareable(hint)
        except TypeError:  # an unhashable hint: the base class handles it uncached
            shared = False
        if not shared:
            return super().from_payload(payload, type_hint)
        if hint in _DECODED_ONCE:
            return _shared_value(hint, payload.data)
        return _shared_adapter(hint).validate_json(payload.data)


_ENCODERS = DefaultPayloadConverter.default_encoding_payload_converters
"""The SDK's encoding converters, in order (stateless instances, shared like the SDK does)."""


class TorenPayloadConverter(PydanticPayloadConverter):
    """`PydanticPayloadConverter` with `_SharedAdapters` as its JSON converter."""

    def __init__(self) -> None:
        # Not the base class's `__init__`: it builds a JSON converter only to replace it.
        self._set_converters(
            *(
                _SharedAdapters() if isinstance(c, JSONPlainPayloadConverter) else c
                for c in _ENCODERS
            )
        )


data_converter = DataConverter(payload_converter_class=TorenPayloadConverter)
"""`temporalio.contrib.pydantic.pydantic_data_converter`, with shared type adapters."""
