#!/usr/bin/env bash
# Sets up and runs every check: ruff, mypy --strict, import-linter contracts, hadolint on the Dockerfile,
# then the whole pytest suite (real Prometheus from the Debian package; the Helm chart rendered, linted and
# validated under tests/packaging; under CI=true a missing component fails the run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"
ruff check rebalancer strategies tests bench scripts
ruff format --check rebalancer strategies tests bench scripts
echo "== mypy --strict"
mypy
echo "== import-linter"
lint-imports
echo "== hadolint"
hadolint Dockerfile
echo "== pytest"
exec pytest "$@"
