"""The digest that names an agent's definition: what a run records as the agent it ran.

`sha256:` and 16 hex digits of a hash over the spec the run records (tool schemas and
contracts, the model, limits and settings, MCP tools as listed) and the agent folder's files as
the worker loaded them (agent.yaml, the instructions, every tool's code, anything else the
folder ships), so a change to any of them, a prompt or a handler's code alike, is a new digest.
Left out: the namespace's registered search attributes (not the agent's), hidden files and
folders (`.toren/`, `.git/`), `__pycache__`, and the content of files over `MAX_HASHED_BYTES`
(their name and size count).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from toren.agent._spec import AgentSpec

__all__ = ["MAX_HASHED_BYTES", "folder_hash", "spec_digest"]

MAX_HASHED_BYTES = 16 * 1024 * 1024
"""Files larger than this (a shipped database, say) count by name and size only."""

_NOT_DEFINITION = ("search_attributes", "digest")
"""Spec fields that are no part of the agent's definition."""
_ADDED_LATER: dict[str, object] = {
    "output_schema": None,
    "output_name": "",
    "max_output_retries": 2,
    "handoffs": {},
    "agents": {},
    "max_parallel_agents": 4,
}
"""Spec fields added after digests existed, left out while at these defaults: an agent that
does not use them keeps the digest it had (a toren upgrade alone is no new definition)."""


def folder_hash(folder: Path) -> str:
    """A hash of the files in `folder` (see the module docstring), read once at load."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        size = path.stat().st_size
        h.update(f"{relative.as_posix()}\0{size}\0".encode())
        if size <= MAX_HASHED_BYTES:
            h.update(path.read_bytes())
    return h.hexdigest()


def spec_digest(spec: AgentSpec, files: str) -> str:
    """`sha256:<16 hex>` of `spec` (its definition fields) and the folder's `files` hash."""
    fields = {
        f.name: getattr(spec, f.name)
        for f in dataclasses.fields(spec)
        if f.name not in _NOT_DEFINITION
        and not (f.name in _ADDED_LATER and getattr(spec, f.name) == _ADDED_LATER[f.name])
    }
    definition = json.dumps(
        fields, sort_keys=True, separators=(",", ":"), default=_plain, ensure_ascii=False
    )
    h = hashlib.sha256(files.encode())
    h.update(definition.encode())
    return "sha256:" + h.hexdigest()[:16]


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
