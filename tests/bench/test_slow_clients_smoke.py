"""bench.slow_clients at a tiny size (a smoke test: its figures lines are parsed, no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHASE = (
    r"probes (\d+)/(\d+) answered 200; latency p50 [\d.]+ ms p95 [\d.]+ ms max [\d.]+ ms; "
    r"alerts accepted (\d+)/(\d+) \([\d.]+ %\); server RSS (\d+) MB"
)


def test_slow_clients_prints_its_figures() -> None:
    argv = [sys.executable, "-m", "bench.slow_clients", "--per-port", "20", "--seconds", "3", "--header-timeout", "2"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"slow clients: 20 per listener .* headerTimeout 2 s", out), out
    for name in ("baseline \\(no slow clients\\)", "with the slow clients"):
        found = re.search(f"{name}: {PHASE}", out)
        assert found is not None, out
        ok, probes, accepted, alerts, rss = map(int, found.groups())
        assert probes > 0 and 0 <= ok <= probes and alerts > 0 and 0 <= accepted <= alerts and rss > 0
    held = re.search(
        r"connections held of 20: webhook mean (\d+) min (\d+), status mean (\d+) min (\d+); (\d+) closed", out
    )
    assert held is not None and all(0 <= int(n) <= 20 for n in held.groups()[:4]), out
    assert int(held.group(5)) > 0, out  # a 2 s header timeout within a 3 s hold: the server let some go
    assert re.search(r"against the baseline: probe p95 x[\d.]+; server RSS [+-]\d+ MB", out), out
    assert re.search(r"verdict: every probe 200 within 1 s: (yes|NO); alerts accepted >= 99 %: (yes|NO)", out), out
