"""What every `toren` command group shares: connecting, the team's codec flags, `--by`'s default.

Each group module (`_runs`, `_approvals`, `_chat`, `_store`, `_setup`) adds its subcommands
with `add_parsers(sub)`, each with its `handler`; `toren.cli.main` parses, runs the handler and
turns what it raises into one line and an exit status. A command reads its codec flags and
connects through `connect(args)`.
"""

from __future__ import annotations

import argparse
import getpass
import os

from temporalio.client import Client

from toren.connect._codec import CodecSettings
from toren.errors import TorenError

__all__ = [
    "Unreachable",
    "add_codec_flags",
    "codec_settings",
    "connect",
    "default_by",
]


class Unreachable(TorenError):
    """The Temporal server did not answer; the message says where we looked and why there."""


def _address_source() -> str:
    if os.environ.get("TEMPORAL_ADDRESS"):
        return "from TEMPORAL_ADDRESS"
    profile = os.environ.get("TEMPORAL_PROFILE")
    if profile:
        return f"from profile {profile!r} (TEMPORAL_PROFILE)"
    config_file = os.environ.get("TEMPORAL_CONFIG_FILE")
    if config_file:
        return f"from the default profile of {config_file} (TEMPORAL_CONFIG_FILE)"
    return "the default (set TEMPORAL_ADDRESS or a temporal.toml profile to change it)"


def codec_settings(args: argparse.Namespace) -> CodecSettings:
    """The codec flags of this command, the environment filling in what they leave out."""
    # `check` and `attach` talk to no server and have no codec flags.
    return CodecSettings.resolve(
        getattr(args, "codec", None),
        getattr(args, "codec_endpoint", None),
        getattr(args, "codec_auth", None),
    )


async def connect(args: argparse.Namespace) -> Client:
    """A client through the team's codec, or `Unreachable` naming the address and its source."""
    from toren.connect import connect, connect_config

    try:
        return await connect(codec=codec_settings(args))
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        address = connect_config().get("target_host")
        raise Unreachable(
            f"no Temporal server answers at {address} ({_address_source()}); start the dev "
            "server with ./temporal-dev.sh (in a toren checkout) or `temporal server start-dev`"
        ) from err


def default_by() -> str:
    """Who decides when `--by` is not given: the user name of this session."""
    try:
        return getpass.getuser()
    except Exception:
        return "cli"


def add_codec_flags(parser: argparse.ArgumentParser) -> None:
    """The team's codec, named as the `temporal` CLI's flags name it (`toren.connect._codec`)."""
    group = parser.add_argument_group("payload codec (an encrypted namespace)")
    group.add_argument(
        "--codec", metavar="MODULE:ATTR",
        help="the team's PayloadCodec or DataConverter, in process (default $TOREN_PAYLOAD_CODEC)",
    )  # fmt: skip
    group.add_argument(
        "--codec-endpoint", metavar="URL",
        help="the team's codec server (default $TEMPORAL_CODEC_ENDPOINT, the profile's codec)",
    )  # fmt: skip
    group.add_argument(
        "--codec-auth", metavar="VALUE",
        help="the codec server's Authorization header (default $TEMPORAL_CODEC_AUTH)",
    )  # fmt: skip
