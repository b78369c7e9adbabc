r"""Server-sent events as the OpenAI provider reads them (WHATWG `text/event-stream` rules).

```python
parser = SSEParser()
for line in ["event: ping", "data: {}", ""]:
    event = parser.feed(line)        # ServerSentEvent("ping", "{}") on the blank line
```

Lines come without their line ending (httpx's `aiter_lines` splits on `\n`, `\r\n` and `\r`). An
event is the lines up to a blank one: `event:` names it (`message` when none does), its `data:`
lines are joined with `\n`, lines starting with `:` are comments (keep-alives), and `id:`,
`retry:` and unknown fields are ignored. An event not ended by a blank line when the stream ends
is dropped, as the standard says: the stream was cut off inside it.

`StreamError` is what a provider's stream reader raises on a stream it cannot read; the provider
turns it into a retryable `ModelHTTPError`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from toren.errors import TorenError

__all__ = ["SNIPPET_CHARS", "SSEParser", "ServerSentEvent", "StreamError", "events", "json_data"]

SNIPPET_CHARS = 120
"""How much of a data line an error quotes."""


class StreamError(TorenError):
    """A stream a provider cannot read; the message says what was wrong (never reaches a user).

    The OpenAI provider prefixes it with its name and raises a retryable `ModelHTTPError`.
    """


@dataclass(frozen=True)
class ServerSentEvent:
    """One event of a `text/event-stream`."""

    event: str
    """The `event:` field, `message` when the event had none."""
    data: str
    """The `data:` lines joined with a newline."""


class SSEParser:
    """Turns lines into events, one line at a time."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._first = True

    def feed(self, line: str) -> ServerSentEvent | None:
        """Take one line (without its ending); return the event a blank line completes."""
        if self._first:
            self._first = False
            line = line.removeprefix("\ufeff")
        if not line:
            event, data = self._event or "message", self._data
            self._event, self._data = "", []
            # A blank line after no data (e.g. after comments only) dispatches nothing.
            return ServerSentEvent(event, "\n".join(data)) if data else None
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


async def events(lines: AsyncIterator[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of a stream of lines, each as soon as its blank line arrives."""
    parser = SSEParser()
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


def json_data(event: ServerSentEvent) -> Any:
    """The event's data decoded as JSON.

    Raises:
        StreamError: The data is not JSON (quoted, shortened).
    """
    try:
        return json.loads(event.data)
    except ValueError:
        snippet = event.data[:SNIPPET_CHARS]
        raise StreamError(
            f"sent a {event.event!r} event whose data is not JSON: {snippet!r}"
        ) from None
