"""Runs last (by name): every history any test fetched is searched for every secret set."""

from __future__ import annotations

import pytest

from tests.conftest import HISTORIES, SECRETS, secret_hits


def test_no_secret_in_any_fetched_history() -> None:
    if not HISTORIES or not SECRETS:
        pytest.skip("no test in this session fetched a history with a secret set")
    hits = secret_hits()
    print(f"secret search: {len(SECRETS)} secrets x {len(HISTORIES)} histories, {len(hits)} hits")
    assert not hits
