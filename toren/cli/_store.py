"""`toren attach`, `toren workspace` and `toren store prune`: what runs keep in the store.

The store (TOREN_STORE: a directory or S3, `toren.store`) holds the attachments a run reads,
the versions of its workspace and the large payloads of its history. These commands put files
in, take a run's workspace out as history last recorded it, and delete what closed runs left.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from toren import client as toren_client
from toren.cli._common import connect

__all__ = ["add_parsers", "cmd_attach", "cmd_store", "cmd_workspace"]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`attach`, `workspace` and `store prune`."""
    p = sub.add_parser("attach", help="parse files into the attachment store; prints their ids")
    p.add_argument("file", nargs="+")
    p.add_argument(
        "--store", help="attachments directory (default: attachments/ in $TOREN_STORE or .toren)"
    )
    p.set_defaults(handler=cmd_attach)

    p = sub.add_parser("workspace", help="download a run's workspace (as history last recorded)")
    p.add_argument("run_id")
    p.add_argument("dir", help="a new or empty directory")
    p.add_argument("--version", help="a version id from the run's history instead of its last")
    p.set_defaults(handler=cmd_workspace)

    p = sub.add_parser("store", help="the store (TOREN_STORE): prune closed runs' objects")
    p.set_defaults(handler=cmd_store)
    store_sub = p.add_subparsers(dest="store_command", required=True)
    p = store_sub.add_parser("prune", help="delete the workspaces of runs closed long ago")
    p.add_argument(
        "--older-than", type=_days, default=None, metavar="DAYS",
        help="runs closed more than DAYS ago (default $TOREN_STORE_RETENTION_DAYS)",
    )  # fmt: skip


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of days, e.g. 7")
    return days


async def cmd_attach(args: argparse.Namespace) -> int:
    from toren.store._attachments import attach

    for path in args.file:
        info = attach(path, store=args.store)
        print(f"{info.id}  {info.name}  {info.pages} page(s)  {info.size} bytes  {info.mime}")
    print("start a run with them: toren run AGENT_DIR 'prompt' --attach <id> ...")
    return 0


async def cmd_workspace(args: argparse.Namespace) -> int:
    from toren.store._workspace import download

    version = args.version
    if version is None:
        client = await connect(args)
        version = await toren_client.workspace_version(client, args.run_id)
        if version is None:
            print(
                f"toren: run {args.run_id!r} recorded no workspace version: none of its calls "
                "used the workspace (or it ran before workspaces were stored)",
                file=sys.stderr,
            )
            return 1
    manifest = await asyncio.to_thread(download, args.run_id, version, Path(args.dir))
    print(
        f"{args.dir}: {len(manifest.files)} file(s), {manifest.bytes():,} bytes "
        f"(workspace version {version[:12]} of {args.run_id})"
    )
    return 0


async def cmd_store(args: argparse.Namespace) -> int:
    from toren.errors import UsageError
    from toren.store._retention import ENV_VAR, prune, retention_days
    from toren.store._store import check_store

    days = args.older_than or retention_days()
    if days is None:
        raise UsageError(f"say how old: --older-than DAYS, or set {ENV_VAR}")
    store = await asyncio.to_thread(check_store)
    client = await connect(args)
    pruned = await prune(client, days, store)
    print(
        f"{store.url}: deleted the versions of {pruned.runs} run(s) closed over "
        f"{days:g} day(s) ago ({pruned.versions} version(s)), and {pruned.blobs} "
        f"blob(s) no version names ({pruned.bytes:,} bytes)"
    )
    return 0
