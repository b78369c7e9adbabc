"""Connecting to Temporal, the same for every side: client, CLI, `toren serve` and worker.

`connect()` reads Temporal's own settings (`temporalio.envconfig`): TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TLS settings and profiles from `temporal.toml`, so one
code path serves the dev server, a self-hosted cluster and Temporal Cloud. So do the team's codec
settings (`_codec`): `TOREN_PAYLOAD_CODEC` (in process), else the codec server of
`TEMPORAL_CODEC_ENDPOINT` / `TEMPORAL_CODEC_AUTH` or the profile's `codec` section, as the
`temporal` CLI reads them.

Also here, because both a client and a worker install them: `TorenPlugin` (`_plugin`), the data
converter extended with the team's codec and external storage (`_team_converter`), and toren's
search attributes (`_search_attributes`). Imports `agent`, `store` and `workflows`; never the
worker's side (the plugin takes a worker's runtime by its protocol, `WorkerRuntime`).
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from toren.connect._codec import CodecSettings

__all__ = ["connect", "connect_config"]


def connect_config(profile: str | None = None) -> dict[str, Any]:
    """The keyword arguments for `Client.connect` from Temporal's env and config files."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config(profile=profile))
    config.setdefault("target_host", "localhost:7233")
    return config


async def connect(
    profile: str | None = None, *, codec: CodecSettings | None = None, **overrides: Any
) -> Client:
    """Connect a client with toren's plugin installed, reading and writing through the codec.

    Args:
        profile: the `temporal.toml` profile (default `TEMPORAL_PROFILE`, else `default`).
        codec: where the team's codec is; default from the environment and the profile
            (`CodecSettings.resolve`). A `data_converter` in `overrides` wins over it.
        overrides: more keyword arguments for `Client.connect`.
    """
    from toren.connect._plugin import TorenPlugin

    config = connect_config(profile)
    config.update(overrides)
    if "data_converter" not in config:
        settings = codec if codec is not None else CodecSettings.resolve(profile=profile)
        team = settings.converter(config.get("namespace") or "default")
        if team is not None:
            config["data_converter"] = team
    plugins = list(config.pop("plugins", [])) + [TorenPlugin()]
    return await Client.connect(**config, plugins=plugins)
