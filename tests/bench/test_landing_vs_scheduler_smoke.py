"""bench.landing_vs_scheduler at a tiny size on the real control plane: one eviction per cluster kind, every
figures line parsed and checked for consistency (no timing assertions). Skipped without the control plane's
binaries, failed under CI=true (tests/controlplane/assets.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bench.landing_clusters import KINDS
from tests.bench.test_bench_smoke import ROOT, SECONDS, figure
from tests.controlplane.assets import require

PCT = r"(\d+\.\d) %"
SUMMARY = (
    rf"(\w+): (\d+) evictions, agreement (\d+)/(\d+) \({PCT}\), expected by the model {PCT}; claimed certain "
    rf"(\d+)/(\d+) \(({PCT}|-)\); landed back (\d+)/(\d+) \({PCT}\), stated risk {PCT}; replacement bound in "
    rf"(\d+\.\d\d) s median, the evicted pod still terminating then (\d+)/(\d+)"
)
BUCKET = r"(\[0\]|\(0, 0\.2\)|\[0\.\d, (?:0\.\d|1)\)|\[1\])"


def test_landing_vs_scheduler_prints_its_figures(tmp_path: Path) -> None:
    require("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubemark")
    details = tmp_path / "details.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.landing_vs_scheduler", "--evictions", str(len(KINDS)), "--details", str(details)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout

    version, kinds, evictions = figure(
        r"landing prediction vs kube-scheduler (v\S+): (\d+) cluster kinds, (\d+) evictions", out
    )
    assert version.startswith("v1.") and kinds == evictions == str(len(KINDS))
    built = re.findall(
        r"== (\w+) \(.*\): (\d+) nodes, (\d+) Deployments, (\d+) pods, placed in \d+\.\d s; not modelled: (.+)", out
    )
    assert [b[0] for b in built] == list(KINDS)
    assert all(int(b[1]) == len(KINDS[b[0]].node_names) <= 8 and int(b[3]) > 0 for b in built)
    assert [b[4] for b in built] == [KINDS[b[0]].unmodelled or "nothing" for b in built]

    summaries = {m[0]: m for m in re.findall(SUMMARY, out)}
    assert list(summaries) == [*KINDS, "all"]
    for name, m in summaries.items():
        n = int(m[1])
        agreed, of, certain_agreed, certain = int(m[2]), int(m[3]), int(m[6]), int(m[7])
        assert n == of == int(m[11]) == int(m[16]) and agreed <= n and certain_agreed <= certain <= n
        assert n == (len(KINDS) if name == "all" else 1)
        assert int(m[10]) <= n and int(m[15]) <= n  # landed back; evicted pods still terminating at the binding

    for name in [*KINDS, "all"]:
        kinds_in = list(KINDS) if name == "all" else [name]
        nodes = sum(len(KINDS[k].node_names) for k in kinds_in)
        buckets = re.findall(rf"  calibration {name} {BUCKET}: (\d+) node chances, stated {PCT}, landed (\d+)", out)
        assert sum(int(b[1]) for b in buckets) == nodes  # one eviction per kind: one chance per node
        assert sum(int(b[3]) for b in buckets) == len(kinds_in)  # every replacement landed on one node
        risks = re.findall(rf"  landing risk {name} {BUCKET}: (\d+) evictions, stated {PCT}, landed back (\d+)", out)
        assert sum(int(r[1]) for r in risks) == len(kinds_in)

    largest = figure(r"percentageOfNodesToScore: at most (\d+) nodes, under 100: the scheduler scores every", out)[0]
    assert int(largest) == max(len(k.node_names) for k in KINDS.values())
    for what in ("", ", kinds it models fully"):
        verdict, agreed, certain, _, _ = figure(
            rf"target \(agreement where the model claims certainty >= 95 %{what}\): (meets|misses) "
            rf"\((\d+)/(\d+), ({PCT}|-)\)",
            out,
        )
        assert int(agreed) <= int(certain) and (verdict == "meets") == (int(agreed) >= 0.95 * int(certain))
    wall, plane, bound, rss = figure(
        rf"wall time: {SECONDS} \(control plane {SECONDS}; eviction to bound {SECONDS} in all\); "
        r"peak RSS (\d+) MB \(this process\)",
        out,
    )
    assert float(wall) > float(plane) > 0 and float(bound) > 0 and int(rss) > 0

    records = json.loads(details.read_text())
    assert [r["kind"] for r in records] == list(KINDS)
    assert all(r["actual"] in KINDS[r["kind"]].node_names and r["replacement"] for r in records)
