#!/usr/bin/env bash
# The README's second command (and what CI runs): set up, lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== ruff"; .venv/bin/ruff check src tests benchmarks
echo "== ruff format"; .venv/bin/ruff format --check src tests benchmarks
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
# pytest exits 5 when it collected no tests: that is not a failure of the code.
if [ "$status" -eq 5 ]; then echo "pytest: no tests ran"; exit 0; fi
exit "$status"
