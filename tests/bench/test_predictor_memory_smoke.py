"""bench.predictor_memory at a tiny size: the canned Prometheus' answers are ones the history source accepts
(daily peaks, hourly profiles, current usage), the predictions follow from them (the benchmark's own check)
and the figures are printed. No memory or time is asserted: the figures are for reading."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.alert_latency import serve_prometheus
from bench.predictor_memory import AT, DAY, HistoryPrometheus, pod_name, policy_text
from rebalancer.adapters.prom.client import LONG_QUERY_CHARS

ROOT = Path(__file__).resolve().parents[2]


def test_predictor_memory_runs_and_its_check_passes() -> None:
    argv = [sys.executable, "-m", "bench.predictor_memory", "--sizes", "300", "--sample", "8"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    out = done.stdout
    measured = re.findall(r"== 300 pods on 10 nodes, nodePeak (\w+): peak RSS (\d+) MB", out)
    assert [peak for peak, _ in measured] == ["coincident", "sum"] and all(int(mb) > 0 for _, mb in measured), out
    assert re.search(r"history [\d.]+ s \(16 queries, 1 batch\(es\) of nodes\)", out), out
    assert re.search(r"history [\d.]+ s \(8 queries, 1 batch\(es\) of nodes\)", out), out
    checks = re.findall(r"correctness: 8 sampled pods .* 12 gone pods' history dropped; (\d+) of 10 nodes .*: OK", out)
    assert checks == ["10", "0"], out
    assert len(re.findall(r"budget \(peak RSS <= 1024 MB\): (?:meets|misses)", out)) == 2, out


def test_the_history_is_read_in_batches_of_nodes_through_posted_filters() -> None:
    """Two batches of 200 nodes: the filtered queries (long enough to be POSTed) are answered with their nodes'
    pods only, every pod with history is read, with its daily peaks as served."""
    from rebalancer.adapters.prom.history import PrometheusHistorySource
    from rebalancer.policy import parse_policy

    model = HistoryPrometheus(nodes=400, pods=1200, at=AT)
    server = serve_prometheus(model)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        policy = parse_policy(policy_text(url, "coincident"))
        predictor = policy.predictor.model_copy(
            update={"history": policy.predictor.history.model_copy(update={"max_samples_per_query": 600 * 288})}
        )
        on_nodes: dict[str, int] = {}
        for i in range(1200):
            node = f"node-{(i * 7919) % 400:05d}"
            on_nodes[node] = on_nodes.get(node, 0) + 1
        with PrometheusHistorySource(policy.prometheus, predictor) as source:
            history = source.read(on_nodes, AT)
    finally:
        server.shutdown()
    assert history.batches == 2 and 200 * len("node-00000|") > LONG_QUERY_CHARS  # POSTed
    assert history.profiles is not None
    read = set(history.pods.keys)
    assert read == {pod_name(i) for i in range(1200 + model.gone) if model.first_day(i) < AT // DAY}
    steady = history.pods.index(pod_name(0))
    assert steady is not None and history.pods.values[steady].tolist() == model.expected_peaks_m(0)
    assert set(history.profiles.keys) == read
