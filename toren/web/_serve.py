"""`toren serve`: the app under uvicorn, refusing to run open beyond loopback."""

from __future__ import annotations

import ipaddress
import logging
import os

from toren.connect._codec import CodecSettings
from toren.errors import UsageError
from toren.web._app import create_app
from toren.web._auth import parse_tokens

__all__ = ["is_loopback", "serve"]

log = logging.getLogger("toren.web")


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    insecure_no_auth: bool = False,
    codec: CodecSettings | None = None,
) -> None:
    """Serve the API until interrupted, reading and writing through the team's `codec`.

    Raises:
        UsageError: no `TOREN_WEB_TOKENS` while bound beyond loopback, without
            `insecure_no_auth`.
    """
    import uvicorn

    tokens = parse_tokens(os.environ.get("TOREN_WEB_TOKENS"))
    if not tokens:
        if not is_loopback(host) and not insecure_no_auth:
            raise UsageError(
                f"refusing to serve on {host} without tokens: set TOREN_WEB_TOKENS "
                "(token or token:agent_a|agent_b, comma-separated), bind 127.0.0.1, or pass "
                "--insecure-no-auth"
            )
        log.warning(
            "no TOREN_WEB_TOKENS: every request on %s:%d may start, read and approve any run",
            host,
            port,
        )
    else:
        log.info("%d bearer token(s) accepted", len(tokens))
    config = uvicorn.Config(
        create_app(tokens=tokens, codec=codec), host=host, port=port, log_level="info"
    )
    await uvicorn.Server(config).serve()
