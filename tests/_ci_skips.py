"""In CI (`CI=true`), a skip of a test CI is set up to run is a failure.

`.ci/run` installs bubblewrap, Chromium with ChromeDriver and PostgreSQL so that the sandbox,
Web UI and PostgreSQL tests run; if one of them still skips (a package renamed, a binary moved),
the suite would pass while testing less. Matched on the skip's reason, which names what is
missing.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["CI_NEEDS", "pytest_runtest_makereport"]

CI_NEEDS = ("bwrap", "bubblewrap", "chromium", "chromedriver", "postgresql", "psycopg")
"""Words in a skip reason that name something CI installs (compared lowercase)."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    """Turn a skip CI should never see into a failure that says what was missing."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and _in_ci()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if any(word in reason.lower() for word in CI_NEEDS):
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true but this test was skipped: {reason}\n"
            "(.ci/run installs postgresql, bubblewrap, chromium and chromium-driver; "
            "CI must run it)"
        )
