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
if [ $# -gt 0 ]; then
  exec pytest "$@"
fi
# The whole suite. The closed loop on the real control plane waits out real minutes (about 6) with little
# CPU of its own: it runs in a pytest of its own beside the rest, and the counts of both are added up.
loop=tests/realcluster/test_closed_loop.py
results=$(mktemp -d)
pytest -p no:cacheprovider --junitxml="$results/loop.xml" "$loop" > "$results/loop.log" 2>&1 &
loop_pid=$!
set +e
pytest --durations=15 --junitxml="$results/rest.xml" --ignore="$loop"
rest=$?
wait "$loop_pid"
looped=$?
set -e
echo "== pytest: the closed loop, run beside the rest"
cat "$results/loop.log"
python - "$results/rest.xml" "$results/loop.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        totals["errors"] += 1  # that pytest never wrote its results
        continue
    for suite in root.iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(f"{passed} passed, {failed} failed, {totals['skipped']} skipped")
PY
if [ "$rest" -ne 0 ] || [ "$looped" -ne 0 ]; then
  exit 1
fi
