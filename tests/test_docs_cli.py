"""The CLI reference (docs/reference/cli.md) lists every command and option `toren --help` has."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from toren.cli import _parser

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"


def _commands(
    parser: argparse.ArgumentParser, prefix: str = "toren"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    text = PAGE.read_text()
    missing = []
    for command, parser in _commands(_parser()):
        if f"{command} " not in text and not text.count(f"{command}\n"):
            missing.append(command)
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and option not in text:
                    missing.append(f"{command} {option}")
    assert not missing, f"not in {PAGE.name}: {missing}"
