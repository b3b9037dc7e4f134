#!/usr/bin/env bash
# Sets up and runs the planner on the embedded demo snapshot: no cluster, no Prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rebalancer plan --demo "$@"
