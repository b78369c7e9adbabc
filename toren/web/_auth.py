"""Bearer tokens from the environment, and which agents each may touch.

`TOREN_WEB_TOKENS` holds comma-separated entries: `token` (every agent) or
`token:agent_a|agent_b` (only those agents), each optionally named for the person or system
that holds it, `alice@token[:agents]`: a named token decides approvals as that name (the `by` of
its decisions, which `approvals.approvers` in agent.yaml checks). A token never appears in a
message or a log line: a bad entry is named by its position.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass

from toren.errors import UsageError

__all__ = ["Access", "Token", "authorize", "parse_tokens"]

_AGENT = re.compile(r"^[a-z][a-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,100}$")


@dataclass(frozen=True)
class Token:
    """One accepted bearer token."""

    secret: str
    """The token itself (compared in constant time, never printed)."""
    agents: frozenset[str] | None = None
    """The agents it may touch; `None` for every agent."""
    name: str | None = None
    """Who holds it (`alice@token`): its decisions are by this name."""

    def __repr__(self) -> str:
        return f"Token(name={self.name!r}, agents={sorted(self.agents) if self.agents else 'all'})"


@dataclass(frozen=True)
class Access:
    """What a request may touch: every agent (`agents is None`) or those named."""

    agents: frozenset[str] | None = None
    identity: str | None = None
    """The token's name: who its decisions are by (`None`: an unnamed token, or no tokens)."""
    open: bool = False
    """No tokens are configured: anyone may do anything, and say who they are."""

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
        name = None
        if "@" in secret:
            name, _, secret = secret.partition("@")
            if not _NAME.match(name):
                raise UsageError(
                    f"TOREN_WEB_TOKENS entry {position}: the name before '@' must be letters, "
                    "digits and _.+- (like alice@<token>)"
                )
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
        tokens.append(Token(secret, agents, name))
    return tokens


def authorize(tokens: list[Token], header: str | None) -> Access | None:
    """The access an `Authorization` header grants, or `None` when it grants nothing.

    With no tokens configured the app runs open: every request may touch every agent.
    """
    if not tokens:
        return Access(open=True)
    scheme, _, presented = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return None
    given = presented.strip().encode()
    found = None
    for token in tokens:  # check them all, so timing says nothing of which matched
        if hmac.compare_digest(token.secret.encode(), given):
            found = token
    return None if found is None else Access(found.agents, found.name)
