"""bench.predictor_bench at a tiny size: it backfills, runs `predict_live`, prints its figures and its own
correctness check passes (the daily peaks read from the real Prometheus equal numpy's quantiles over the
generated samples). No timing is asserted: the figures are for reading, the machines are shared."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.history_gen import render_lines
from tests.adapters.prom_fixture import require_binary

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(["--nodes", "20", "--pods", "200", "--step", "1800"], id="recording-rule"),
        pytest.param(["--form", "cadvisor", "--nodes", "5", "--pods", "30", "--step", "300"], id="cadvisor-subquery"),
        pytest.param(
            ["--nodes", "20", "--pods", "200", "--step", "1800", "--profile-rule", "--compressed"],
            id="hourly-profile-rule-compressed",
        ),
    ],
)
def test_predictor_bench_runs_and_its_check_passes(tmp_path: Path, size: list[str]) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    argv = [sys.executable, "-m", "bench.predictor_bench", *size, "--runs", "1", "--no-compact", "--sample", "8"]
    done = subprocess.run(
        [*argv, "--cache", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"backfill \(not part of the target\): [\d.]+ M samples", out), out
    assert re.search(r"predict_live, median of 1 fresh processes: [\d.]+ s end to end", out), out
    assert re.search(r"history read [\d.]+ s \(16 queries, 1 batch\(es\) of nodes\)", out), out
    assert re.search(r"Prometheus over the run: CPU [\d.]+ s, peak RSS \d+ MB", out), out
    assert re.search(
        r"correctness: 8 sampled pods .* daily peaks equal numpy.s quantile .* hourly means equal .*: OK", out
    ), out
    assert ("from the hourly rule namespace_pod:cpu_usage:avg1h" in out) == ("--profile-rule" in size), out
    # a second run reuses the backfilled directory
    again = subprocess.run(
        [*argv, "--cache", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0 and "backfill: reusing" in again.stdout, again.stdout + again.stderr


def test_predictor_bench_alternates_the_profile_reads_and_checks_both(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.predictor_bench", "--nodes", "10", "--pods", "60", "--step", "1800"]
    argv += ["--runs", "1", "--no-compact", "--sample", "6", "--compare-profile-rule", "--cache", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "== nodePeak: coincident, profiles by range query" in out, out
    assert "== nodePeak: coincident, profiles from the hourly rule" in out, out
    assert len(re.findall(r"correctness: 6 sampled pods .*: OK", out)) == 2, out
    assert "of the hour before each hourly rule sample" in out, out


def test_openmetrics_lines_are_fixed_width_and_skip_absent_samples() -> None:
    prefixes = [b'm{pod="a"} ', b'm{pod="bb"} ']
    values = np.array([[12345, 7], [99999, 10000]], dtype=np.int64)  # 1e-4 cores
    times = np.array([1_709_510_400, 1_709_510_700], dtype=np.int64)
    present = np.array([[True, False], [True, True]])
    text = render_lines(prefixes, values, 1, times, present).decode()
    assert text.splitlines() == [
        'm{pod="a"} 1.2345 1709510400',
        'm{pod="bb"} 9.9999 1709510400',
        'm{pod="bb"} 1.0000 1709510700',
    ]
    with pytest.raises(ValueError, match="does not fit 1 digit"):
        render_lines(prefixes[:1], np.array([[100000]]), 1, times[:1], present[:1, :1])
    nine = render_lines(prefixes[:1], np.array([[123456789]]), 1, times[:1], present[:1, :1], decimals=9)
    assert nine.decode() == 'm{pod="a"} 0.123456789 1709510400\n'
