"""Client memory of `rebalancer predict` on a live cluster, with its history answered by a canned Prometheus.

    .venv/bin/python -m bench.predictor_memory                       # 30,000 and 150,000 pods, profiles or not
    .venv/bin/python -m bench.predictor_memory --sizes 150000 --node-peaks coincident --runs 1
    .venv/bin/python -m bench.predictor_memory --sizes 300 --sample 8   # a smoke run

What the client holds does not depend on who answers, and a real backfill of 150,000 pods x 9 days is too
big to build here: a canned Prometheus in this process answers, in Prometheus' wire format, the queries
`predict_live` sends with the recording-rule history (as ``bench.predictor_bench`` reads it, 5-minute
rule, 8 days): per day and batch of nodes the daily peaks (an instant vector, one value per pod) and, with
``nodePeak: coincident``, the hourly means (a matrix, one point per pod on the query's grid), for the pods
of the nodes in the query's ``node=~"..."`` filter (GET or form-encoded POST); and the current usage
(``bench.alert_latency.CannedPrometheus``). The test API server serves the cluster (30 pods a node);
4 % more pods are gone from it but still have history, and a tenth of the served pods were created during
the window (none to 8 days of history). Each run is ``predict_live`` in a fresh child process: its peak
RSS is the figure (the wall time is printed for information only: canned answers cost Prometheus nothing).

A sample of pods is then checked: each was predicted from as many days as the canned answers hold for it,
and its predicted peak is the policy's aggregation of the daily peaks served; with profiles, the nodes are
predicted by their coincident peak. A mismatch ends the benchmark with an error.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.alert_latency import CannedPrometheus, _metric, _vector, serve_prometheus
from bench.cluster_gen import NAMESPACES, node_index_of
from bench.harness import kubeconfig, run_child, served_cluster
from bench.history_gen import RULE
from bench.predictor_bench import add_child_arguments, child_measure

DAY = 86_400
AT = 20_780 * DAY + 10 * 3600  # 2026-11-22 10:00 UTC: the window is the 8 days before
DAYS = 8
PODS_PER_NODE = 30
BUDGET_MB = 1024
LEVELS = (0.05, 0.1, 0.2, 0.4, 0.8)  # cores: a pod's mean at its busiest hour (by its index modulo 5)
CLASSES = len(LEVELS) * 24  # a pod's level and the hour it peaks at (by its index modulo 120)


def pod_name(i: int) -> tuple[str, str]:
    """(namespace, name) of pod ``i`` as ``bench.cluster_gen`` makes it (indexes past the cluster's: gone pods)."""
    return NAMESPACES[i % len(NAMESPACES)], f"svc-{(i // 7) % 2000:04d}-5d8f9c7b6-{i:06x}"


def day_factor(day: int) -> float:
    return 1.0 + 0.05 * ((day * 3) % 5)


def hourly_mean(klass: int, day: int, hour: int) -> str:
    """The canned mean of a pod of ``klass`` over ``hour`` (UTC) of ``day`` (days since the epoch), in cores."""
    level, phase = LEVELS[klass % len(LEVELS)], klass // len(LEVELS)
    shape = 0.55 + 0.45 * math.cos(2 * math.pi * (hour - phase) / 24)
    return f"{level * day_factor(day) * shape:.6f}"


def daily_peak(klass: int, day: int) -> str:
    """The canned daily 0.95 quantile of a pod of ``klass``: above its busiest hour's mean."""
    return f"{LEVELS[klass % len(LEVELS)] * day_factor(day) * 1.1:.6f}"


class HistoryPrometheus(CannedPrometheus):
    """The usage answers of :class:`CannedPrometheus`, and the history queries of the recording rule."""

    def __init__(self, nodes: int, pods: int, at: float) -> None:
        super().__init__(nodes, pods)
        self.served = pods
        self.gone = max(1, pods * 4 // 100)
        self.today = int(at // DAY)
        self.history_on: dict[str, list[int]] = {n: [] for n in self.nodes}
        self._series: list[bytes] = []
        for i in range(pods + self.gone):
            node = self.nodes[node_index_of(i, nodes)]
            namespace, name = pod_name(i)
            self.history_on[node].append(i)
            self._series.append(_metric({"namespace": namespace, "node": node, "pod": name}))

    def first_day(self, i: int) -> int:
        """The first day (since the epoch) pod ``i`` has history on: a tenth of the served pods were created
        during the window (0 to 8 days ago; 0: today, no history yet)."""
        return self.today - (i // 10) % (DAYS + 1) if i < self.served and i % 10 == 3 else 0

    def answer(self, query: str, at: float) -> bytes:
        if RULE not in query:
            return super().answer(query, at)
        if "quantile_over_time(" not in query:
            raise ValueError(f"not a daily-peak query: {query[:200]}")
        day = int((at - 1) // DAY)
        values = [daily_peak(k, day).encode() for k in range(CLASSES)]
        return _vector(((self._series[i], values[i % CLASSES]) for i in self._pods_of(query, day)), at)

    def answer_range(self, query: str, start: float, end: float, step: float) -> bytes:
        if RULE not in query or "avg_over_time(" not in query:
            raise ValueError(f"not a profile query: {query[:200]}")
        day = int((end - 1) // DAY)
        times = np.arange(start, end + step / 2, step)
        hours = [int(((t - step / 2) % DAY) // 3600) for t in times]
        stamps = [f"{t:.0f}".encode() if float(t).is_integer() else f"{t:.3f}".encode() for t in times]
        blocks = [
            b"["
            + b",".join(b'[%s,"%s"]' % (s, hourly_mean(k, day, h).encode()) for s, h in zip(stamps, hours, strict=True))
            + b"]"
            for k in range(CLASSES)
        ]
        result = b",".join(
            b'{"metric":%s,"values":%s}' % (self._series[i], blocks[i % CLASSES]) for i in self._pods_of(query, day)
        )
        return b'{"status":"success","data":{"resultType":"matrix","result":[' + result + b"]}}"

    def _pods_of(self, query: str, day: int) -> Iterable[int]:
        """The pods with history on ``day`` on the nodes the query's filter names (every node without one)."""
        match = re.search(r'node=~"([^"]*)"', query)
        nodes = match.group(1).replace("\\\\", "\\").replace("\\.", ".").split("|") if match else self.nodes
        return (i for n in nodes for i in self.history_on.get(n, ()) if self.first_day(i) <= day)

    def expected_peaks_m(self, i: int) -> list[float]:
        """Pod ``i``'s daily peaks in the window as served, in millicores (NaN: no answer that day), oldest first."""
        days = range(self.today - DAYS, self.today)
        return [float(daily_peak(i % CLASSES, d)) * 1000 if self.first_day(i) <= d else math.nan for d in days]


def policy_text(prometheus_url: str, node_peak: str) -> str:
    """Default settings but the history's form (the recording rule, every 5 minutes) and the days."""
    return (
        f"prometheus: {{url: {json.dumps(prometheus_url)}}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
        f"predictor:\n  days: {DAYS}\n  nodePeak: {node_peak}\n"
        f"  history: {{recordingRule: {RULE}, resolution: 300s}}\n"
    )


def sample_pods(pods: int, size: int, seed: int) -> list[int]:
    """Served pods, half of them created during the window."""
    rng = np.random.default_rng(seed)
    late = np.arange(3, pods, 10)
    steady = np.setdiff1d(np.arange(pods), late)
    wanted = min(size // 2, late.size)
    picked = [
        rng.choice(late, wanted, replace=False),
        rng.choice(steady, min(size - wanted, steady.size), replace=False),
    ]
    return sorted(int(i) for i in np.concatenate(picked))


def verify(model: HistoryPrometheus, sample: list[int], policy_path: str, run: dict[str, Any], node_peak: str) -> str:
    """The sampled pods' predictions follow from the daily peaks served; raises SystemExit if not."""
    from rebalancer.planning.predict.aggregate import aggregate_with
    from rebalancer.policy import load_policy

    settings = load_policy(policy_path).predictor
    problems = []
    for i, measured in zip(sample, run["sample"], strict=True):
        want = np.array(model.expected_peaks_m(i))
        days = int((~np.isnan(want)).sum())
        if measured is None:
            problems.append(f"pod {i}: not in the prediction")
            continue
        cpu_m, source, history_days = measured
        if history_days != days:
            problems.append(f"pod {i}: predicted from {history_days} day(s) of history, {days} served")
        elif days >= settings.min_history_days:
            aggregated = float(aggregate_with(want[None, :], None, settings)[0])
            if source != "history" or not np.isclose(cpu_m, aggregated, rtol=1e-6):
                problems.append(f"pod {i}: predicted {cpu_m} m from {source}, the served peaks give {aggregated} m")
        elif source == "history":
            problems.append(f"pod {i}: {days} day(s) of history, below minHistoryDays, yet predicted from history")
    if run["dropped_history"] != model.gone:
        problems.append(f"{run['dropped_history']} pods with history gone from the cluster, {model.gone} served")
    coincident = run["coincident"]
    if (node_peak == "coincident") != (coincident > 0):
        problems.append(f"nodePeak {node_peak}, yet {coincident} nodes predicted by their coincident peak")
    if problems:
        raise SystemExit("CORRECTNESS CHECK FAILED:\n  " + "\n  ".join(problems))
    return (
        f"correctness: {len(sample)} sampled pods predicted from the daily peaks served "
        f"({sum(1 for i in sample if i % 10 == 3)} created during the window); {model.gone} gone pods' history "
        f"dropped; {coincident} of {run['nodes']} nodes by their coincident peak: OK"
    )


def report(pods: int, nodes: int, node_peak: str, runs: list[dict[str, Any]]) -> float:
    rss = statistics.median(r["rss_mb"] for r in runs)
    first = runs[0]
    steps = first["steps"]
    each = ", ".join(f"{r['rss_mb']:.0f}" for r in runs)
    print(
        f"== {pods} pods on {nodes} nodes, nodePeak {node_peak}: peak RSS {rss:.0f} MB "
        f"(median of {len(runs)} fresh processes: {each}; {first['rss_before_mb']:.0f} MB before the call)"
    )
    print(
        f"  wall time (canned answers, for information only): {first['total_s']:.1f} s: cluster list "
        f"{steps['cluster']:.1f} s, history {steps['history']:.1f} s ({first['queries']} queries, "
        f"{first['batches']} batch(es) of nodes), predict {steps['predict']:.1f} s; "
        f"client CPU {first['cpu_s']:.1f} s"
    )
    print(
        f"  prediction: {first['nodes']} nodes ({first['coincident']} by their coincident peak), "
        f"{first['hot']} predicted hot; pods by source {first['sources']}; current usage of "
        f"{first['current_nodes']} nodes{'; ' + first['current_problem'] if first['current_problem'] else ''}"
    )
    verdict = "meets" if rss <= BUDGET_MB else "misses"
    print(f"  budget (peak RSS <= {BUDGET_MB} MB): {verdict}", flush=True)
    return float(rss)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="30000,150000", help="pod counts, comma-separated (30 pods a node)")
    parser.add_argument("--node-peaks", default="coincident,sum", help="nodePeak per child, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="fresh processes per size and nodePeak")
    parser.add_argument("--sample", type=int, default=20, help="pods whose predictions are checked")
    parser.add_argument("--seed", type=int, default=1)
    add_child_arguments(parser)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    if args.child == "measure":
        sample = json.loads(Path(args.sample_pods).read_text())
        print(json.dumps(child_measure(args.policy, args.kubeconfig, AT, sample)))
        return
    work = Path(tempfile.mkdtemp(prefix="predictor-memory-"))
    for pods in sorted(int(s) for s in args.sizes.split(",")):
        nodes = max(1, pods // PODS_PER_NODE)
        model = HistoryPrometheus(nodes, pods, AT)
        sample = sample_pods(pods, args.sample, args.seed)
        sample_path = work / f"sample-{pods}.json"
        sample_path.write_text(json.dumps([pod_name(i) for i in sample]))
        prometheus = serve_prometheus(model)
        url = f"http://127.0.0.1:{prometheus.server_address[1]}"
        try:
            with served_cluster(nodes, pods) as served:
                print(f"cluster: {nodes} nodes, {pods} pods served (loaded in {served.load_s:.1f} s)", flush=True)
                config = kubeconfig(served.url)
                for node_peak in args.node_peaks.split(","):
                    policy_path = work / f"policy-{node_peak}.yaml"
                    policy_path.write_text(policy_text(url, node_peak))
                    child = ["--policy", str(policy_path), "--kubeconfig", config, "--sample-pods", str(sample_path)]
                    runs = [run_child("bench.predictor_memory", "measure", child) for _ in range(args.runs)]
                    report(pods, nodes, node_peak, runs)
                    print(f"  {verify(model, sample, str(policy_path), runs[0], node_peak)}", flush=True)
        finally:
            prometheus.shutdown()


if __name__ == "__main__":
    main()
