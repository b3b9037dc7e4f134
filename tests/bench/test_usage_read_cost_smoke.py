"""bench.usage_read_cost at a tiny size: it backfills, reads the usage of the backfilled cluster from the real
Prometheus and prints its figures. No timing is asserted: the figures are for reading, the machines are
shared."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.adapters.prom_fixture import require_binary

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]


def test_usage_read_cost_reads_the_backfilled_cluster_and_prints_its_figures(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    argv = [sys.executable, "-m", "bench.usage_read_cost", "--nodes", "6", "--pods", "40", "--reads", "2"]
    argv += ["--no-compact", "--cache", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # the read found every node and the served pods of the backfilled cluster, not an empty answer
    read = re.search(
        r"usage read, median of 2: [\d.]+ s wall, Prometheus CPU [\d.]+ s .* (\d+) pods and 6 nodes read", out
    )
    assert read is not None and int(read.group(1)) >= 36, out
    assert re.search(r"baseline \(one instant query .*; batches of 20\), median a query: [\d.]+ s wall", out), out
    for minutes in (1, 5, 10):
        assert re.search(
            rf"a cycle every {minutes} min: \d+ s of Prometheus CPU an hour \([\d.]+ % of a core\)", out
        ), out
    assert re.search(r"RSS: ours \d+ MB after the reads, Prometheus \d+ MB at its peak", out), out
