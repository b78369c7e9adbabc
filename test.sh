#!/usr/bin/env bash
# Run the test suite (lint, types, the docs site's build, tests) against a real Temporal dev
# server that the tests start themselves. Sets up .venv first if needed. Extra arguments go to pytest.
# Skipped tests are listed with their reasons (-rs); with CI=true a skip of a test CI installs
# the tools for (sandbox, browser, PostgreSQL) fails the run (tests/_ci_skips.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
echo "==> pip install -c constraints.txt -e '.[dev]'"
.venv/bin/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'

echo "==> ruff"
.venv/bin/ruff check toren tests examples bench
.venv/bin/ruff format --check toren tests examples bench
echo "==> mypy --strict toren"
.venv/bin/mypy toren
echo "==> mkdocs build --strict (the docs site; offline)"
site_dir="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"
echo "==> pytest"
.venv/bin/pytest -rs "$@"
