r"""The one redaction function: every secret value, in every form it takes, becomes `[redacted]`.

Everything a worker sends to Temporal (tool results and their changes, model replies, error
messages and details, log lines) passes through a `Redactor` first, so history, memo, search
attributes and continue-as-new input (all built from those results) never hold a secret.

```python
redactor = Redactor(["sk-live-123", 'pa"ss\\word'])
redactor.text("key sk-live-123")                 # 'key [redacted]'
redactor.value({"out": json.dumps({"pw": 'pa"ss\\word'})})   # the JSON-escaped form too
raise redactor.failure(err) from None             # an exception, as a redacted ApplicationError
```

A secret is matched as it is and in the forms it takes on its way into history: JSON-escaped
(`"` → `\"`, `\` → `\\`, non-ASCII as `\uXXXX` or not; twice, for JSON inside JSON), Python's
`repr` of it and of its UTF-8 bytes (each JSON-escaped too), percent-encoded (a value inside a
URL), and the password of a secret that is a URL. A structured value (a tool's returned dict)
is redacted leaf by leaf before it is serialized (`Redactor.value`), then as text.
Values shorter than `MIN_SECRET_CHARS` are never matched: replacing every `ab` in every result
would garble ordinary text, and the markers' places would give the value away regardless.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from temporalio.exceptions import ApplicationError

__all__ = ["MARKER", "MIN_SECRET_CHARS", "Redactor", "forms", "redactor"]

MARKER = "[redacted]"
"""What stands where a secret was."""
MIN_SECRET_CHARS = 4
"""Shorter values are not redacted (see the module docstring); the worker warns about them."""


def forms(secret: str) -> set[str]:
    """Every form of `secret` that may reach history, each at least `MIN_SECRET_CHARS` long."""
    found = {secret}
    parts = urlsplit(secret) if "://" in secret else None
    if parts is not None and parts.password:
        found |= {parts.password, unquote(parts.password)}
    for value in list(found):
        # A `repr` (of the string, or of its UTF-8 bytes: `str(secret.encode())`) may itself be
        # JSON-escaped on its way in (`{"debug": repr(obj)}`): each form is escaped in turn.
        escaped = {
            value,
            repr(value)[1:-1],
            repr(value.encode("utf-8", "surrogatepass"))[2:-1],
            # `quote` leaves `/` as it is by default (a value put in a URL's path): that form too.
            quote(value),
            quote(value, safe=""),
            quote_plus(value, safe=""),
        }
        for _ in range(2):  # a JSON string inside a JSON string doubles each escape
            escaped |= {json.dumps(v, ensure_ascii=a)[1:-1] for v in escaped for a in (True, False)}
        found |= escaped
    return {f for f in found if len(f) >= MIN_SECRET_CHARS}


class Redactor:
    """Replaces every form of a set of secrets with `MARKER`, in text and in JSON-like values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}))
        """The secrets this redactor hides (values too short to match are left out)."""
        every = sorted({f for s in self.secrets for f in forms(s)}, key=lambda f: (-len(f), f))
        # Longest first: where one secret contains another, the whole of it goes.
        self._pattern = re.compile("|".join(map(re.escape, every))) if every else None
        self.longest = len(every[0]) if every else 0
        """Length of the longest form of a secret (a stream holds back this much text)."""

    def text(self, text: str) -> str:
        """`text` with every secret replaced by `MARKER`."""
        return self._pattern.sub(MARKER, text) if self._pattern else text

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of each secret in `text`."""
        return [m.span() for m in self._pattern.finditer(text)] if self._pattern else []

    def value(self, value: Any) -> Any:
        """`value` with every string and bytes in it redacted, dict keys included.

        Walks dicts, lists and tuples; other values stay as they are.
        """
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bytes):
            text = value.decode("utf-8", "surrogateescape")
            return self.text(text).encode("utf-8", "surrogateescape")
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        return value

    def failure(self, err: BaseException) -> ApplicationError:
        """`err` as an `ApplicationError` whose message and details are redacted.

        Raise it `from None`: a cause would carry the original message into the failure. An
        `ApplicationError` keeps its type and retry settings; any other exception becomes what
        Temporal would have made of it (retryable, typed by its class name).
        """
        if isinstance(err, ApplicationError):
            return ApplicationError(
                self.text(err.message),
                *self.value(list(err.details)),
                type=err.type,
                non_retryable=err.non_retryable,
                next_retry_delay=err.next_retry_delay,
                category=err.category,
            )
        return ApplicationError(self.text(str(err)), type=type(err).__name__)


@functools.lru_cache(maxsize=64)
def _cached(secrets: tuple[str, ...]) -> Redactor:
    return Redactor(secrets)


def redactor(secrets: Iterable[str]) -> Redactor:
    """The `Redactor` of `secrets`, built once per distinct set (a worker asks per call)."""
    return _cached(tuple(sorted(set(secrets))))
