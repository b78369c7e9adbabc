"""toren's data converter as an extension of the team's: their codec, failures and storage stay.

```python
client = await Client.connect(
    address, data_converter=DataConverter(payload_codec=TeamCodec()), plugins=[TorenPlugin()]
)
assert client.data_converter.payload_codec is not None      # the team's codec is kept
```

What toren changes is only the payload converter, and only as far as its own types need:

- the team's converter is the SDK's default: it becomes toren's (`TorenPayloadConverter`, the
  pydantic converter), which writes what the default writes for every value the default
  can write, and reads all of it back, so the team's workflows read and write as before;
- the team has a payload converter of its own: toren's handles values and type hints of
  toren's types (and values the team's cannot write); every other value goes to the team's,
  so the team's workflows on the same worker keep their converter exactly.

Everything else of the team's `DataConverter` is kept as it is: the payload codec, the failure
converter (with `encode_common_attributes`, toren's errors are encoded too), and the external
storage (toren's own payload store, `TOREN_PAYLOAD_STORE`, is added only when the team has none).
A payload in an encoding no converter here reads raises `UndecodablePayloadError`, whose
message names the setting that fixes it, instead of the SDK's `KeyError`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Sequence
from typing import Any, ClassVar

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    PayloadConverter,
    SerializationContext,
    WithSerializationContext,
)

from toren.agent._converter import TorenPayloadConverter
from toren.errors import UndecodablePayloadError
from toren.store import _payloads as storage

__all__ = [
    "BesideTeamConverter",
    "ReadingPayloadConverter",
    "beside",
    "extend_converter",
    "readable_encodings",
]


class ReadingPayloadConverter(TorenPayloadConverter):
    """toren's payload converter, naming the fix for a payload it cannot read."""

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """Decode `payloads` (see the base class).

        Raises:
            UndecodablePayloadError: a payload's encoding is no converter's here (encrypted).
        """
        try:
            return super().from_payloads(payloads, type_hints)
        except KeyError:
            _raise_unreadable(payloads, self.converters)
            raise


def _raise_unreadable(payloads: Sequence[Payload], known: typing.Iterable[bytes]) -> None:
    readable = set(known)
    for payload in payloads:
        encoding = payload.metadata.get("encoding", b"")
        if encoding not in readable:
            raise UndecodablePayloadError(encoding.decode(errors="replace") or "none") from None


@functools.lru_cache(maxsize=512)
def _is_toren(hint: Any) -> bool:
    """Whether `hint` (a type, or a generic over types) names one of toren's types."""
    module = getattr(hint, "__module__", None)
    if isinstance(module, str) and (module == "toren" or module.startswith("toren.")):
        return True
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not None or isinstance(hint, types.UnionType):
        return any(_is_toren(a) for a in args if not isinstance(a, (str, int, float)))
    return False


def _toren_hint(hint: Any) -> bool:
    try:
        return _is_toren(hint)
    except TypeError:  # unhashable
        return False


class BesideTeamConverter(PayloadConverter, WithSerializationContext):
    """The team's payload converter, with toren's taking toren's types (see the module)."""

    team_class: ClassVar[type[PayloadConverter]] = DefaultPayloadConverter
    """The team's converter class (set on the subclass `beside` makes)."""

    def __init__(
        self, team: PayloadConverter | None = None, toren: ReadingPayloadConverter | None = None
    ) -> None:
        """Create the converter (no arguments: as a `DataConverter` makes it)."""
        self.team = team if team is not None else self.team_class()
        self.toren = toren if toren is not None else ReadingPayloadConverter()

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        """Encode each value with toren's converter (toren's types) or the team's."""
        out = []
        for value in values:
            if _toren_hint(type(value)):
                out += self.toren.to_payloads([value])
                continue
            try:
                out += self.team.to_payloads([value])
            except (RuntimeError, TypeError):  # a value the team's cannot write at all
                out += self.toren.to_payloads([value])
        return out

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """Decode each payload with toren's converter (toren's types) or the team's."""
        out = []
        for i, payload in enumerate(payloads):
            hint = type_hints[i] if type_hints and i < len(type_hints) else None
            hints = None if hint is None else [hint]
            if hint is not None and _toren_hint(hint):
                out += self.toren.from_payloads([payload], hints)
                continue
            try:
                out += self.team.from_payloads([payload], hints)
            except KeyError:  # an encoding only toren's reads, or none does (it says which)
                out += self.toren.from_payloads([payload], hints)
        return out

    def with_context(self, context: SerializationContext) -> BesideTeamConverter:
        """The team's converter with `context` (if it takes one) beside toren's."""
        team = self.team
        if isinstance(team, WithSerializationContext):
            team = team.with_context(context)
        return type(self)(team, self.toren)


@functools.cache
def beside(team_class: type[PayloadConverter]) -> type[BesideTeamConverter]:
    """The converter class that puts toren's converter beside `team_class`."""
    return type(
        f"TorenBeside{team_class.__name__}", (BesideTeamConverter,), {"team_class": team_class}
    )


def _payload_converter_class(team: type[PayloadConverter]) -> type[PayloadConverter]:
    if issubclass(team, (ReadingPayloadConverter, BesideTeamConverter)):
        return team  # extended already (the plugin on both the client and the worker)
    if team is DefaultPayloadConverter or team is TorenPayloadConverter:
        return ReadingPayloadConverter
    return beside(team)


def extend_converter(
    existing: DataConverter | None = None, payload_store: str | None = None
) -> DataConverter:
    """The team's data converter with toren's payload converter added (see the module).

    Args:
        existing: the team's converter (a client's `data_converter`); `None`: the SDK's default.
        payload_store: toren's store for large payloads (`toren.store._payloads`), used only when
            `existing` has no external storage; `None` reads `TOREN_PAYLOAD_STORE`.
    """
    base = existing if existing is not None else DataConverter.default
    cls = _payload_converter_class(base.payload_converter_class)
    converter = base
    if cls is not base.payload_converter_class:
        converter = dataclasses.replace(base, payload_converter_class=cls)
    if converter.external_storage is None:
        converter = storage.data_converter(payload_store, base=converter)
    return converter


def readable_encodings(converter: DataConverter) -> set[bytes]:
    """The payload encodings `converter`'s payload converter reads."""
    inner: Any = converter.payload_converter_class()
    found: set[bytes] = set()
    for part in (inner, getattr(inner, "team", None), getattr(inner, "toren", None)):
        if isinstance(part, CompositePayloadConverter):
            found |= set(part.converters)
    return found or {
        c.encoding.encode() for c in DefaultPayloadConverter.default_encoding_payload_converters
    }
