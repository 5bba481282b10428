#!/usr/bin/env bash
# The test command of the README and of CI: set up, lint, run the whole suite (real Spark, broker, PostgreSQL).
# Crash matrices run a seeded sample (the seed is printed; SPARKONCE_SAMPLE=all runs every case, see tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy src/sparkonce src/sparkonce_local
# Two pytest-xdist workers (SPARKONCE_TEST_WORKERS to change; 0 runs in this process): most of the suite's time is
# JVMs starting and crash drivers waiting, which two workers overlap on the two cores CI has. Tests that must not run
# beside a copy of themselves (spark-pipelines' port, the standalone cluster) share one worker (tests/conftest.py).
exec .venv/bin/pytest -n "${SPARKONCE_TEST_WORKERS:-2}" --dist loadgroup "$@"
