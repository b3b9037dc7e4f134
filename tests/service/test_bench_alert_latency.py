"""Smoke test of `python -m bench.alert_latency` at a small size: it runs end to end and prints its
figures (no timing is asserted: the machines are shared)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("resources", "memory_read"), [("cpu", False), ("cpu,memory,pods", True)])
def test_the_alert_latency_benchmark_runs_at_a_small_size(resources: str, memory_read: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.alert_latency", "--nodes", "60", "--pods", "1200", "--alerts", "2",
         "--steady-cycles", "1", "--resources", resources],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert f"cluster: 60 nodes, 1200 pods, thresholds on {resources}; serve ready" in out, out
    queries = re.search(r"memory queries answered by the canned Prometheus: (\d+)", out)
    assert queries is not None and (int(queries.group(1)) > 0) == memory_read, out
    assert re.search(r"alert-to-first-eviction over 2 alerts .*: p50 \d+ ms, p95 \d+ ms, max \d+ ms", out), out
    for row in ("POST until queued in serve", "step usage", "step evictor", "queued until the eviction was sent"):
        assert row in out, out
    assert "steady-state scheduled cycles on the warm watch cache (1 cycles)" in out, out
    assert "plan cycle: facts+usage+snapshot+plan" in out, out
    assert re.search(r"whole cycle \(serve's log\) +median +\d+\.\d ms", out), out
