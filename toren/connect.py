"""Connecting to Temporal the way Temporal's own tools do (`temporalio.envconfig`).

TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS settings and profiles from
`temporal.toml` all apply, so one code path serves the dev server, a self-hosted cluster and
Temporal Cloud.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

__all__ = ["connect", "connect_config"]


def connect_config(profile: str | None = None) -> dict[str, Any]:
    """The keyword arguments for `Client.connect` from Temporal's env and config files."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(profile=profile))
    config.setdefault("target_host", "localhost:7233")
    return config


async def connect(profile: str | None = None, **overrides: Any) -> Client:
    """Connect a client with toren's plugin installed."""
    from toren._plugin import TorenPlugin

    config = connect_config(profile)
    config.update(overrides)
    plugins = list(config.pop("plugins", [])) + [TorenPlugin()]
    return await Client.connect(**config, plugins=plugins)
