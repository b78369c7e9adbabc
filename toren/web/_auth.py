"""Bearer tokens from the environment, and which agents each may touch.

`TOREN_WEB_TOKENS` holds comma-separated entries: `token` (every agent) or
`token:agent_a|agent_b` (only those agents). A token never appears in a message or a log line:
a bad entry is named by its position.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass

from toren.errors import UsageError

__all__ = ["Access", "Token", "authorize", "parse_tokens"]

_AGENT = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Token:
    """One accepted bearer token."""

    secret: str
    """The token itself (compared in constant time, never printed)."""
    agents: frozenset[str] | None = None
    """The agents it may touch; `None` for every agent."""

    def __repr__(self) -> str:
        return f"Token(agents={sorted(self.agents) if self.agents else 'all'})"


@dataclass(frozen=True)
class Access:
    """What a request may touch: every agent (`agents is None`) or those named."""

    agents: frozenset[str] | None = None

    def allows(self, agent: str) -> bool:
        """Whether the request may touch `agent`'s runs and threads."""
        return self.agents is None or agent in self.agents


def parse_tokens(value: str | None) -> list[Token]:
    """The tokens `TOREN_WEB_TOKENS` declares (empty when unset or blank).

    Raises:
        UsageError: an entry is empty or names something that is not an agent name.
    """
    tokens = []
    for position, entry in enumerate((value or "").split(","), start=1):
        entry = entry.strip()
        if not entry:
            continue
        secret, sep, names = entry.partition(":")
        if not secret:
            raise UsageError(f"TOREN_WEB_TOKENS entry {position} has no token before ':'")
        agents = None
        if sep:
            listed = [n.strip() for n in names.split("|") if n.strip()]
            bad = [n for n in listed if not _AGENT.match(n)]
            if bad or not listed:
                raise UsageError(
                    f"TOREN_WEB_TOKENS entry {position}: after ':' list agent names separated by "
                    f"'|' (got {', '.join(map(repr, bad)) or 'none'})"
                )
            agents = frozenset(listed)
        tokens.append(Token(secret, agents))
    return tokens


def authorize(tokens: list[Token], header: str | None) -> Access | None:
    """The access an `Authorization` header grants, or `None` when it grants nothing.

    With no tokens configured the app runs open: every request may touch every agent.
    """
    if not tokens:
        return Access()
    scheme, _, presented = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return None
    given = presented.strip().encode()
    found = None
    for token in tokens:  # check them all, so timing says nothing of which matched
        if hmac.compare_digest(token.secret.encode(), given):
            found = token
    return None if found is None else Access(found.agents)
