"""`toren setup` and `toren serve`: what an operator runs beside the team's Temporal.

`setup` registers toren's search attributes in the namespace once (the approval inbox, `toren
pending` with no run, finds waiting calls through them); `serve` is the HTTP API (`toren.web`,
the `web` extra).
"""

from __future__ import annotations

import argparse
import logging
import sys

from toren.cli._common import codec_settings, connect

__all__ = ["add_parsers", "cmd_serve", "cmd_setup"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`setup` and `serve`."""
    p = sub.add_parser("setup", help="register toren's search attributes in the namespace")
    p.set_defaults(handler=cmd_setup)

    p = sub.add_parser("serve", help="serve the HTTP API (bearer tokens from TOREN_WEB_TOKENS)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve beyond loopback without TOREN_WEB_TOKENS (anyone may approve anything)",
    )
    p.set_defaults(handler=cmd_serve)


async def cmd_setup(args: argparse.Namespace) -> int:
    from toren.connect import _search_attributes as search_attributes

    client = await connect(args)
    added = await search_attributes.register(client)
    if added:
        print(f"registered {', '.join(added)} in namespace {client.namespace!r}")
        # Both look the attributes up once, when they start (`toren.worker`, `toren.client`).
        print("restart running toren workers and `toren serve` so that new runs set them")
    else:
        print(f"namespace {client.namespace!r} already has toren's search attributes")
    return 0


async def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from toren.web import serve
    except ImportError as err:  # the web extra is optional
        print(f"toren: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    await serve(
        args.host, args.port, insecure_no_auth=args.insecure_no_auth, codec=codec_settings(args)
    )
    return 0
