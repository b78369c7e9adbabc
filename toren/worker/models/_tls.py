"""The TLS contexts the providers' HTTP clients verify servers with, each made once per worker.

Loading the CA bundle is most of what building an HTTP client costs (some 80 ms on a busy
machine), and a provider builds a client per call (no connection pool outlives an activity's
event loop), so the context is shared instead (`python -m bench.perf.providers` shows it).
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx
import httpx2

__all__ = ["httpx2_tls", "httpx_tls"]


@cache
def httpx_tls() -> ssl.SSLContext:
    """`httpx`'s default TLS context (the OpenAI SDK's and google-genai's client)."""
    return httpx.create_ssl_context()


@cache
def httpx2_tls() -> ssl.SSLContext:
    """`httpx2`'s default TLS context (the Anthropic SDK's client)."""
    return httpx2.create_ssl_context()
