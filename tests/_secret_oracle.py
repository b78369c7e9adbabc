"""An independent search for secrets in Temporal histories: its own list of encodings.

`toren.worker._redact` decides which forms of a secret it removes; this module must not ask it, or a
form the redactor forgets would be forgotten by the search too. So it lists, on its own, the
ways a value may be written down on its way into history, and searches every string, every
byte field and every decoded payload of every event (results, inputs, memo, search
attributes, failures and their details, summaries):

```python
needles = encodings("pa ss+wörd")            # raw, JSON-escaped (any depth), repr, quote, ...
hits = search(history, {"pa ss+wörd"}, decode)   # [(secret, where, form), ...]
```
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload

__all__ = ["MIN_NEEDLE_BYTES", "encodings", "search", "texts_of"]

JSON_DEPTH = 4
"""How many times a value may be JSON-encoded inside JSON (each doubles its escapes)."""
MIN_NEEDLE_BYTES = 6
"""Encoded forms shorter than this are left out (a base64 core of a short value is noise)."""


def _json_forms(value: str) -> set[str]:
    """`value` as it sits inside a JSON string, once to `JSON_DEPTH` times nested."""
    found = {value}
    level = {value}
    for _ in range(JSON_DEPTH):
        level = {json.dumps(v, ensure_ascii=a)[1:-1] for v in level for a in (True, False)}
        found |= level
    return found


def _base64_cores(data: bytes, encode: Callable[[bytes], bytes]) -> set[bytes]:
    """What base64 of any text holding `data` must contain, at each of the 3 alignments.

    Characters whose 6 bits mix bytes of `data` with bytes around it are cut off both ends.
    """
    cores = set()
    for k in range(3):
        encoded = encode(b"\0" * k + data)
        start = -(-8 * k // 6)  # the first character made of `data`'s bits only
        end = (8 * (k + len(data))) // 6
        cores.add(encoded[start:end])
    return cores


def _binary_forms(value: str) -> set[bytes]:
    """`value`'s bytes in the binary-to-text encodings a tool or a library may use."""
    data = value.encode()
    found: set[bytes] = set()
    found |= _base64_cores(data, base64.b64encode)
    found |= _base64_cores(data, base64.urlsafe_b64encode)
    found |= {data.hex().encode(), data.hex().upper().encode()}
    found |= {
        "".join(f"%{b:02X}" for b in data).encode(),
        "".join(f"%{b:02x}" for b in data).encode(),
    }
    found |= {value.encode("utf-16-le"), value.encode("utf-16-be")}
    return found


def encodings(secret: str) -> set[bytes]:
    """Every form of `secret` this search looks for, as UTF-8 bytes (or raw bytes)."""
    texts = _json_forms(secret)
    written = {repr(secret)[1:-1], repr(secret.encode())[2:-1]}
    written |= {
        quote(secret),
        quote(secret, safe=""),
        quote_plus(secret),
        quote_plus(secret, safe=""),
    }
    # A repr or a URL put into JSON (`{"debug": repr(obj)}` in a tool's result) is escaped in
    # turn: each written form at every JSON depth too.
    for form in written:
        texts |= _json_forms(form)
    found = {t.encode() for t in texts}
    for text in {secret, *_json_forms(secret)}:
        found |= _binary_forms(text)
    return {f for f in found if f == secret.encode() or len(f) >= MIN_NEEDLE_BYTES}


Decode = Callable[[Payload], Any]
"""Decodes one payload into a Python value (raising when it cannot)."""


def texts_of(message: Message, decode: Decode, where: str = "") -> Iterator[tuple[str, bytes]]:
    """(where, bytes) for every string, byte field and decoded payload in `message`."""
    if isinstance(message, Payload):
        yield where, message.data
        for key, value in message.metadata.items():
            yield f"{where}.metadata[{key}]", value
        try:
            decoded = decode(message)
        except Exception:  # noqa: BLE001  (not a payload the converter knows: raw bytes only)
            return
        yield from _values(decoded, f"{where}(decoded)")
        return
    for field, value in message.ListFields():
        name = f"{where}.{field.name}" if where else field.name
        items: Iterable[Any]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            items = value.values()
        elif isinstance(value, Message | str | bytes | int | float | bool):
            items = [value]
        else:  # a repeated field
            items = value
        for item in items:
            if isinstance(item, Message):
                yield from texts_of(item, decode, name)
            elif isinstance(item, str):
                yield name, item.encode()
            elif isinstance(item, bytes):
                yield name, item


def _values(value: Any, where: str) -> Iterator[tuple[str, bytes]]:
    """Each string in a decoded value, and the whole value as JSON (both ASCII and not)."""
    yield where, json.dumps(value, ensure_ascii=False, default=str).encode()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield where, item.encode()
        elif isinstance(item, bytes):
            yield where, item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


SEPARATOR = b"\xff\xfe\xff"
"""Between two searched texts, so no form is found across two of them (never valid UTF-8)."""


def search(events: Iterable[Message], secrets: Iterable[str], decode: Decode) -> list[str]:
    """One line per (secret, form, place) found in `events` (a history's events)."""
    blobs = [
        (where, blob)
        for n, event in enumerate(events)
        for where, blob in texts_of(event, decode, f"event {n + 1}")
    ]
    everything = SEPARATOR.join(blob for _, blob in blobs)
    hits = []
    for secret in secrets:
        for form in encodings(secret):
            if form in everything:  # rare: only then say where
                hits += [f"{secret!r} as {form!r} in {w}" for w, b in blobs if form in b]
    return hits
