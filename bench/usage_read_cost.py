"""What one cycle's usage read costs Prometheus, and so what a schedule costs it in an hour.

Every cycle, scheduled or alert-driven, reads the current usage (``PrometheusUsageSource.read``, the
default queries: each pod's P95 over the 10-minute window of its 5-minute CPU rates, each node's, and the
pods too young for a window). This runs that read ``--reads`` times against the real Prometheus (Debian's
2.42, its default query limits) on a backfilled TSDB: the predictor benchmark's recording-rule form
(``bench.tsdb_build``), whose last 15 minutes hold cAdvisor counters of two containers a pod and every
node's root cgroup, a sample a minute. For each read it takes Prometheus' CPU seconds (/proc) and the
wall time, and prints the medians, what a cycle every 1, 5 and 10 minutes costs in an hour, and the
baseline, measured alternately in the same run: one instant query of every node's CPU rate (what the
descheduler's Prometheus mode reads a run), timed in batches of 20 (one takes about a clock tick of CPU).
It reads persisted blocks holding only the tail: no live head block, no other series beside.

    python -m bench.usage_read_cost                                  # 1,000 nodes, 30,000 pods, 10 reads
    python -m bench.usage_read_cost --nodes 20 --pods 200 --reads 3 --no-compact   # seconds

The backfilled directory is cached as the predictor benchmark's (``--cache``, ``--rebuild``), with 2 days
of history: only the tail is read.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import process_cpu_s
from bench.harness import rss_mb as own_rss_mb
from bench.history_gen import Shape
from bench.predictor_bench import backfill_line, rss_mb
from bench.tsdb_build import DEFAULT_CACHE, ensure_tsdb, prometheus_on

BASELINE = 'sum by (node) (rate(container_cpu_usage_seconds_total{id="/"}[5m]))'
SCHEDULES = (60, 300, 600)  # seconds between cycles, per hour figures
BASELINE_BATCH = 20  # baseline queries timed together: one takes about a clock tick (10 ms) of CPU


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.usage_read_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--reads", type=int, default=10, help="usage reads (and baseline queries) measured")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--rebuild", action="store_true", help="backfill again even if cached")
    parser.add_argument("--no-compact", action="store_true", help="keep promtool's 2 h blocks (small sizes)")
    return parser.parse_args(argv)


def measured(pid: int, read: Callable[[], None]) -> dict[str, float]:
    """One call of ``read``: its wall time, our CPU and Prometheus' CPU seconds over it."""
    prom, ours, started = process_cpu_s(pid), time.process_time(), time.perf_counter()
    read()
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - ours,
        "prom_cpu_s": process_cpu_s(pid) - prom,
    }


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    from rebalancer.adapters.prom import PrometheusUsageSource
    from rebalancer.policy import parse_policy

    shape = Shape(args.nodes, args.pods, days=2, seed=args.seed)
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=True).stdout
    print(f"usage read cost: {shape.nodes} nodes, {shape.pods} pods; {version.splitlines()[0]}", flush=True)
    root, manifest = ensure_tsdb(shape, args.cache, rebuild=args.rebuild, compact=not args.no_compact, log=print)
    print(backfill_line(manifest), flush=True)
    server = prometheus_on(root).start()
    try:
        pid = server.pid
        assert pid is not None
        policy = parse_policy(
            f"prometheus: {{url: {server.url}}}\n"
            "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
        )
        reads: list[dict[str, float]] = []
        baselines: list[dict[str, float]] = []
        found: dict[str, int] = {}
        with PrometheusUsageSource(policy.prometheus) as source:

            def usage() -> None:
                report = source.read(float(shape.at))
                found.update(pods=len(report.pod_cpu_m), nodes=len(report.node_cpu_m))

            def baseline() -> None:
                for _ in range(BASELINE_BATCH):
                    answer = server.query(BASELINE, float(shape.at))
                    found["baseline_nodes"] = len(answer["result"]) if isinstance(answer, dict) else 0

            usage()  # the first read opens the connection and warms Prometheus' caches, as a running service has
            baseline()
            for _ in range(args.reads):  # alternated: both see the same machine
                reads.append(measured(pid, usage))
                baselines.append(measured(pid, baseline))
        prom_peak = rss_mb(pid, "VmHWM")
    finally:
        server.stop()
    if found["nodes"] != shape.nodes or found["pods"] < shape.pods * 0.9 or found["baseline_nodes"] != shape.nodes:
        print(
            f"the read found {found['nodes']} nodes and {found['pods']} pods, the baseline {found['baseline_nodes']} "
            f"nodes: not the backfilled cluster of {shape.nodes} nodes and {shape.pods} pods",
            file=sys.stderr,
        )
        return 1
    report(reads, baselines, found, prom_peak)
    return 0


def report(
    reads: list[dict[str, float]], baselines: list[dict[str, float]], found: dict[str, int], prom_peak: float
) -> None:
    prom, wall = median(reads, "prom_cpu_s"), median(reads, "wall_s")
    base_prom = median(baselines, "prom_cpu_s") / BASELINE_BATCH
    base_wall = median(baselines, "wall_s") / BASELINE_BATCH
    each = ", ".join(f"{r['prom_cpu_s']:.2f}" for r in reads)
    print(
        f"usage read, median of {len(reads)}: {wall:.2f} s wall, Prometheus CPU {prom:.2f} s (each: {each}), "
        f"ours {median(reads, 'cpu_s'):.2f} s; {found['pods']} pods and {found['nodes']} nodes read"
    )
    print(
        f"baseline (one instant query of every node's CPU rate; batches of {BASELINE_BATCH}), median a query: "
        f"{base_wall:.4f} s wall, Prometheus CPU {base_prom:.4f} s"
    )
    ratio = f"{prom / base_prom:.0f}x" if base_prom > 0 else "- (the baseline's batches took under a clock tick)"
    print(f"usage read / baseline: Prometheus CPU {ratio}, wall {wall / base_wall:.0f}x")
    for every in SCHEDULES:
        per_hour = prom * 3600 / every
        print(
            f"a cycle every {every // 60} min: {per_hour:.0f} s of Prometheus CPU an hour "
            f"({per_hour / 36:.1f} % of a core)"
        )
    print(f"RSS: ours {own_rss_mb():.0f} MB after the reads, Prometheus {prom_peak:.0f} MB at its peak")


if __name__ == "__main__":
    sys.exit(main())
