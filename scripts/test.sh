#!/usr/bin/env bash
# The test command of the README and of CI: set up, lint, run the whole suite (real Spark, broker, PostgreSQL).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy src/sparkonce src/sparkonce_local
exec .venv/bin/pytest "$@"
