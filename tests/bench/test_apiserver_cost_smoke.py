"""`bench.apiserver_cost` at a tiny size on the real control plane: it loads the cluster through the API,
runs our read in each mode and encoding and the descheduler, and prints every figures line (no timing asserted)."""

from __future__ import annotations

import re

from tests.bench.test_bench_smoke import run
from tests.controlplane.assets import require

NUMBER = r"(\d+\.\d+)"


def test_apiserver_cost_prints_its_figures() -> None:
    require("etcd", "etcd34", "kube-apiserver", "descheduler")
    out = run("bench.apiserver_cost", "--nodes", "10", "--pods", "120", "--rounds", "1", "--etcd", "3.4")

    assert re.search(r"figures: etcd 3.4 loaded 10 nodes, \d+ ReplicaSets, 120 pods", out), out
    for label in ("descheduler", "ours-cached/protobuf", "ours-cached/json", "ours-paged/protobuf", "ours-paged/json"):
        line = re.search(rf"figures: etcd 3.4 {label} median of 1: wall {NUMBER} s, apiserver cpu {NUMBER} s", out)
        assert line is not None, f"no {label} line in:\n{out}"
    assert "ours-watchList" not in out  # etcd 3.4 refuses the watch-list: not offered as a mode
    assert re.search(r"round 1 etcd 3.4 ours-cached/protobuf \(read as cached/protobuf,", out), out  # as it read
    assert re.search(r"round 1 etcd 3.4 ours-paged/json \(read as paged/json,", out), out
    assert re.search(rf"ours-cached/protobuf / descheduler: wall {NUMBER}x, apiserver cpu {NUMBER}x", out), out
