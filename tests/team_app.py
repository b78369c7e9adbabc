"""The team's own workflow, whose values only the team's own payload converter writes."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
)


class Money:
    """The team's own type, which only the team's converter writes (neither JSON nor pydantic)."""

    cents: int
    currency: str

    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency


class MoneyConverter(EncodingPayloadConverter):
    """Writes `Money` as `12.34 EUR` under its own encoding."""

    @property
    def encoding(self) -> str:
        return "text/team-money"

    def to_payload(self, value: Any) -> Payload | None:
        if not isinstance(value, Money):
            return None
        text = f"{value.cents // 100}.{value.cents % 100:02d} {value.currency}"
        return Payload(metadata={"encoding": self.encoding.encode()}, data=text.encode())

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        amount, currency = payload.data.decode().split()
        units, cents = amount.split(".")
        return Money(int(units) * 100 + int(cents), currency)


class TeamPayloadConverter(CompositePayloadConverter):
    """The team's payload converter: its `Money` first, then the SDK's default ones."""

    def __init__(self) -> None:
        super().__init__(
            MoneyConverter(), *DefaultPayloadConverter.default_encoding_payload_converters
        )


@workflow.defn
class DoubleIt:
    """The team's own workflow, whose input and result only the team's converter writes."""

    @workflow.run
    async def run(self, amount: Money) -> Money:
        return Money(amount.cents * 2, amount.currency)
