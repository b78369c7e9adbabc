"""Keep AWS session tokens out of botocore's DEBUG logs.

botocore logs each request it sends at DEBUG (`botocore.endpoint`: the prepared request with
its headers; `botocore.auth`: the canonical request SigV4 signs, headers included), so with
an app's logging at DEBUG the `X-Amz-Security-Token` of temporary credentials (a role's, an
`AWS_SESSION_TOKEN`) would land in its logs. toren never logs at DEBUG itself, but a worker
embedded in a team's app may. A filter on those loggers replaces the token's value with
`[redacted]` before any handler sees the record; the rest of the record is left as botocore
wrote it (the signature is per request, the access key id is no secret).
"""

from __future__ import annotations

import logging
import re

__all__ = ["LOGGERS", "hide_session_tokens"]

LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.hooks", "botocore.parsers")
"""The loggers that write a request's headers (a filter holds for its own logger only)."""

_TOKEN = re.compile(r"(?i)(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)([^'\"\s,}\]]+)")


class _HideSessionTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not format: not ours
            return True
        hidden = _TOKEN.sub(r"\1[redacted]", text)
        if hidden != text:
            record.msg, record.args = hidden, ()
        return True


def hide_session_tokens() -> None:
    """Install the filter on botocore's request loggers, once per process."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideSessionTokens) for f in logger.filters):
            logger.addFilter(_HideSessionTokens())
