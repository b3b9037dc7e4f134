"""Full plan cycle benchmark (CronJob mode): list nodes and pods, read usage, plan, at several sizes.

    .venv/bin/python -m bench.cycle_bench                            # 15,000 / 50,000 / 150,000 pods
    .venv/bin/python -m bench.cycle_bench --sizes 300 --runs 1 --baseline-pods 100   # a smoke run
    .venv/bin/python -m bench.cycle_bench --sizes 150000 --list-modes watchList,paged --rounds 2
    .venv/bin/python -m bench.cycle_bench --sizes 150000 --resources cpu --resources cpu,memory,pods --rounds 2

``--list-modes``: how the cluster is read (policy ``kubernetes.listMode``), one fresh child per mode and
round against the same served cluster, the modes alternating; the last lines compare them.
``--resources`` (repeatable, ``cpu`` by default): the resources the policy's thresholds name; with several,
one fresh child per set alternates in the same way, and the last lines compare each with the first.

For each size the test API server serves the synthetic cluster (bench.cluster_gen, 30 pods a node) in
its own process, and a canned Prometheus in this process answers the three default usage queries in
Prometheus' wire format (one series per pod, 150,000 at the largest size; a quarter of the nodes run
hot, a quarter cold), and the two memory queries when the policy names memory (an eighth of the nodes,
CPU-normal, run memory-hot). A fresh child process then measures, each as a median of ``--runs``:

- the full cycle: ``app.plan_live`` as ``rebalancer plan`` runs it (KubeSource, PrometheusUsageSource,
  snapshot and strategies), and its peak RSS;
- the snapshot alone (``KubeSource.read_facts``), the usage read alone (``PrometheusUsageSource.read``,
  without the pods' memory: a cycle reads that after the snapshot, for the nodes it may relieve) and the
  plan alone (``cycle.plan_cycle`` on them and every pod's memory), with the collector paused as
  ``plan_live`` pauses it;
- the memory a listing holds beyond its result (peak minus retained RSS across the first read): pages
  are decoded as they come, so this stays flat whatever the size;
- for the snapshot alone, how it was read (watch-list or pages), this process's CPU time (all its
  threads) and the bytes it read from the wire, beside the test API server's CPU time.

The official client's default path (generated ``V1Pod`` models) lists the first ``--baseline-pods``
pods of the smallest size once, and is extrapolated linearly to each size for the ratio.
Figures, not a timed test: the machine is shared, read medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from bench.alert_latency import serve_prometheus, stamped
from bench.cluster_gen import ALLOCATABLE_MEMORY, NAMESPACES, node_index_of, pod_memory_bytes, pod_usage_millicores
from bench.harness import (
    bytes_read,
    kubeconfig,
    not_scraped_here,
    peak_rss_mb,
    process_cpu_s,
    resource_set,
    rss_mb,
    run_child,
    served_cluster,
    thresholds,
)

PODS_PER_NODE = 30
ALLOCATABLE_M = 31750  # bench.cluster_gen's nodes
NODE_LOAD = (0.10, 0.80, 0.40, 0.45)  # by node index modulo 4: cold, hot, normal, normal
NODE_MEMORY = (0.15, 0.45, 0.85, 0.45, 0.15, 0.45, 0.45, 0.45)  # by index modulo 8: CPU-cold nodes cold; 2: hot
POLICY = (
    "prometheus: {{url: '{url}', maxDataAge: 10m}}\n"
    "pools: {{label: node-pool}}\n"
    "kubernetes: {{listMode: {list_mode}}}\n"
    "strategies:\n- {{kind: LowNodeUtilization, thresholds: {{{low}}}, targetThresholds: {{{high}}}}}\n"
)


def policy_text(url: str, list_mode: str, resources: str) -> str:
    """The benchmark's policy with thresholds on ``resources`` (comma-separated, cpu first)."""
    low, high = thresholds(resources)
    return POLICY.format(url=url, list_mode=list_mode, low=low, high=high)


# the recommended pairing (docs/user-guide.md): placement prediction with a landing guard on the pools it rebalances
# (the planner models the guard's PreferNoSchedule mark on hot nodes, so replacements can land elsewhere)
GUARD = "landingGuard:\n  pools:\n" + "".join(
    f"  - {{pool: {pool}, effect: PreferNoSchedule, maxMarkedFraction: 0.5}}\n"
    for pool in ("general", "inference", "batch")
)


@dataclass
class SkewedPrometheus:
    """Answers the default usage queries for bench.cluster_gen's cluster (see bench.serve_cluster)."""

    nodes: int
    pods: int

    @cached_property
    def _pod_labels(self) -> list[dict[str, str]]:
        return [
            {"namespace": NAMESPACES[i % len(NAMESPACES)], "pod": f"svc-{(i // 7) % 2000:04d}-5d8f9c7b6-{i:06x}"}
            for i in range(self.pods)
        ]

    @cached_property
    def _pods(self) -> bytes:
        return _vector([(labels, pod_usage_millicores(i) / 1000) for i, labels in enumerate(self._pod_labels)], 0)

    @cached_property
    def _pods_memory(self) -> bytes:
        return _vector([(labels, pod_memory_bytes(i)) for i, labels in enumerate(self._pod_labels)], 0)

    def answer(self, query: str, at: float) -> bytes:
        names = [f"node-{i:05d}" for i in range(self.nodes)]
        if " unless " in query:  # the data-span checks: a settled cluster has no young series
            return _vector([], at)
        if not_scraped_here(query):
            return _vector([], at)
        if "timestamp(" in query:
            return _vector([({"node": n}, at - 15) for n in names], at)
        memory = "container_memory_working_set_bytes" in query
        if 'id="/"' in query and memory:
            return _vector([({"node": n}, ALLOCATABLE_MEMORY * NODE_MEMORY[i % 8]) for i, n in enumerate(names)], at)
        if 'id="/"' in query:
            return _vector([({"node": n}, ALLOCATABLE_M * NODE_LOAD[i % 4] / 1000) for i, n in enumerate(names)], at)
        match = re.search(r'node=~"([^"]*)"', query)
        if match is None:
            return stamped(self._pods_memory if memory else self._pods, at)  # built once, stamped with ``at``
        wanted = {int(n.rsplit("-", 1)[1]) for n in match.group(1).replace("\\\\.", ".").split("|")}
        value = pod_memory_bytes if memory else (lambda i: pod_usage_millicores(i) / 1000)
        on = [i for i in range(self.pods) if node_index_of(i, self.nodes) in wanted]
        return _vector([(self._pod_labels[i], value(i)) for i in on], at)


def _vector(series: list[tuple[dict[str, str], float]], at: float) -> bytes:
    """An instant vector evaluated at ``at`` (0: to be :func:`stamped` later)."""
    result = [{"metric": labels, "value": [round(at, 3), f"{value:.6f}"]} for labels, value in series]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}, separators=(",", ":")
    ).encode()


# --- child ------------------------------------------------------------------------------------


def child_cycle(
    kube_url: str, prom_url: str, server_pid: int, runs: int, list_mode: str, resources: str
) -> dict[str, Any]:
    from rebalancer.adapters.kube import KubeSource, connect
    from rebalancer.adapters.prom import PrometheusUsageSource
    from rebalancer.planning.protections import Protections
    from rebalancer.policy import parse_policy

    policy = parse_policy(policy_text(prom_url, list_mode, resources))
    api = connect(kubeconfig(kube_url))
    source = KubeSource(
        api, Protections.from_settings(policy.protections).annotations_read(), list_mode=policy.kubernetes.list_mode
    )
    out = first_read(source)
    out.update(snapshots(source, server_pid, runs))
    with PrometheusUsageSource(policy.prometheus) as prometheus:
        out.update(usage_reads(prometheus, runs, policy.reads_memory))
        out.update(plans(source, prometheus, policy, resources, runs))
    out.update(cycles(api, policy, runs))
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def first_read(source: Any) -> dict[str, Any]:
    """The first read in this fresh process, and what a listing holds beyond its result."""
    from rebalancer.app.collector import paused

    before = rss_mb()
    started = time.perf_counter()
    with paused():
        facts = source.read_facts()
    return {
        "first_snapshot_s": time.perf_counter() - started,
        "retained_mb": rss_mb() - before,
        "transient_mb": peak_rss_mb() - rss_mb(),
        "pods": len(facts.pods),
        "nodes": len(facts.nodes),
    }


def snapshots(source: Any, server_pid: int, runs: int) -> dict[str, Any]:
    from rebalancer.app.collector import paused

    seconds, server_cpu, client_cpu, wire = [], [], [], []
    for _ in range(runs):
        cpu, mine, read, started = process_cpu_s(server_pid), time.process_time(), bytes_read(), time.perf_counter()
        with paused():
            source.read_facts()
        seconds.append(time.perf_counter() - started)
        client_cpu.append(time.process_time() - mine)
        wire.append(bytes_read() - read)
        server_cpu.append(process_cpu_s(server_pid) - cpu)
    stats = source.last_stats
    return {
        "snapshot_s": seconds,
        "server_cpu_s": server_cpu,
        "client_cpu_s": client_cpu,
        "wire_mb": [b / 1e6 for b in wire],
        "pages": stats.pages["pods"],
        "path": stats.modes["pods"],
    }


def usage_reads(prometheus: Any, runs: int, memory: bool) -> dict[str, Any]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        usage = prometheus.read(time.time(), memory=memory, pod_memory=False)  # as a cycle reads it first
        seconds.append(time.perf_counter() - started)
    return {"usage_s": seconds, "series": len(usage.pod_cpu_m), "memory_series": len(usage.node_memory or {})}


def plans(source: Any, prometheus: Any, policy: Any, resources: str, runs: int) -> dict[str, Any]:
    """The plan alone, as configured (placement prediction on), with prediction off and with the landing
    guard modelled; with the collector paused, as ``app.plan_live`` plans."""
    from rebalancer.app.collector import paused
    from rebalancer.policy import parse_policy
    from rebalancer.policy.cycle import plan_cycle

    with paused():
        facts = source.read_facts()
    usage = prometheus.read(time.time(), memory=policy.reads_memory)
    unpredicted = policy.model_copy(
        update={"strategies": tuple(s.model_copy(update={"predict_placement": False}) for s in policy.strategies)}
    )
    guarded = parse_policy(policy_text(policy.prometheus.url, policy.kubernetes.list_mode, resources) + GUARD)
    out: dict[str, Any] = {}
    for key, variant in (("plan", policy), ("plan_unpredicted", unpredicted), ("plan_guarded", guarded)):
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            with paused():
                plan = plan_cycle(facts, usage, variant, time.time())[1]
            seconds.append(time.perf_counter() - started)
        out[f"{key}_s"], out[f"{key}_planned"] = seconds, len(plan.evictions)
    return out


def cycles(api: Any, policy: Any, runs: int) -> dict[str, Any]:
    """``rebalancer plan``'s cycle: app.plan_live (list, read usage, plan)."""
    from rebalancer.app.root import plan_live
    from rebalancer.app.runtime import Runtime

    out: dict[str, Any] = {"cycle_s": []}
    for _ in range(runs):
        started = time.perf_counter()
        outcome = plan_live(Runtime(policy, api))
        out["cycle_s"].append(time.perf_counter() - started)
        if outcome.plan.blocked:
            raise SystemExit(f"the cycle made no plan: {outcome.plan.blocked}")
        out["hot"] = sum(1 for r in outcome.plan.results for d in r.node_decisions if d.node_class == "hot")
        out["planned"] = len(outcome.plan.evictions)
        out["memory_read"] = len(outcome.snapshot.pod_memory)
        del outcome
    return out


# --- parent -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One child's configuration: how the cluster is listed and the resources the thresholds name."""

    list_mode: str
    resources: str

    def label(self, variants: list[Variant]) -> str:
        """What tells this variant from the others: its list mode, its resources, or both."""
        modes = {v.list_mode for v in variants}
        sets = {v.resources for v in variants}
        if len(sets) == 1:
            return self.list_mode
        return self.resources if len(modes) == 1 else f"{self.list_mode} {self.resources}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="15000,50000,150000", help="pod counts, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-pods", type=int, default=15_000)
    parser.add_argument("--list-modes", default="auto", help="kubernetes.listMode per child, comma-separated")
    parser.add_argument(
        "--resources",
        type=resource_set,
        action="append",
        help="the resources the thresholds name, comma-separated (cpu, memory, pods; cpu by default); repeatable",
    )
    parser.add_argument("--rounds", type=int, default=1, help="children per variant, the variants alternating")
    parser.add_argument("--list-mode", default="auto", help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--child", choices=["cycle"])
    parser.add_argument("--url")
    parser.add_argument("--prometheus")
    parser.add_argument("--server-pid", type=int, default=0)
    args = parser.parse_args()
    if args.child == "cycle":
        resources = (args.resources or ["cpu"])[-1]
        print(json.dumps(child_cycle(args.url, args.prometheus, args.server_pid, args.runs, args.list_mode, resources)))
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    variants = [Variant(mode, res) for mode in args.list_modes.split(",") for res in args.resources or ["cpu"]]
    baseline: dict[str, Any] | None = None
    rows = []
    for pods in sizes:
        nodes = max(1, pods // PODS_PER_NODE)
        prometheus = serve_prometheus(SkewedPrometheus(nodes, pods))
        prom_url = f"http://127.0.0.1:{prometheus.server_address[1]}"
        by_variant: dict[Variant, list[dict[str, Any]]] = {variant: [] for variant in variants}
        try:
            with served_cluster(nodes, pods) as served:
                for _ in range(args.rounds):
                    for variant in variants:
                        child = ["--url", served.url, "--prometheus", prom_url, "--server-pid", str(served.pid)]
                        child += ["--runs", str(args.runs), "--list-mode", variant.list_mode]
                        child += ["--resources", variant.resources]
                        by_variant[variant].append(run_child("bench.cycle_bench", "cycle", child))
                if baseline is None:
                    baseline = run_child(
                        "bench.snapshot_bench",
                        "baseline",
                        ["--url", served.url, "--baseline-pods", str(args.baseline_pods)],
                    )
        finally:
            prometheus.shutdown()
        for variant in variants:
            for figures in by_variant[variant]:
                rows.append(report_size(pods, nodes, figures, baseline, args.runs, variant))
        if len(variants) > 1:
            by_resources = len({v.list_mode for v in variants}) == 1
            report_paths(pods, {variant.label(variants): runs for variant, runs in by_variant.items()}, by_resources)
    report_scaling(rows)


def median(values: list[float]) -> float:
    return statistics.median(values)


def report_size(
    pods: int, nodes: int, f: dict[str, Any], base: dict[str, Any], runs: int, variant: Variant
) -> dict[str, float]:
    cycle, snapshot, usage, plan = (median(f[k]) for k in ("cycle_s", "snapshot_s", "usage_s", "plan_s"))
    rss = f["peak_rss_mb"]
    base_s = base["seconds"] / base["pods"] * pods
    memory = f", {f['memory_series']} node memory series" if f["memory_series"] else ""
    print(
        f"== {pods} pods on {nodes} nodes ({f['series']} pod usage series{memory}), listMode {variant.list_mode}, "
        f"thresholds on {variant.resources}, medians of {runs}"
    )
    print(
        f"full cycle: {cycle:.2f} s ({', '.join(f'{s:.2f}' for s in f['cycle_s'])}); "
        f"peak RSS {rss:.0f} MB; {f['hot']} hot nodes, {f['planned']} evictions planned"
        + (f"; memory of {f['memory_read']} pods read (those on the hot nodes)" if f.get("memory_read") else "")
    )
    print(
        f"  snapshot alone: {snapshot:.2f} s (pods read by {f['path']}, {f['pages']} requests; client CPU "
        f"{median(f['client_cpu_s']):.2f} s, {median(f['wire_mb']):.0f} MB on the wire; test API server CPU "
        f"{median(f['server_cpu_s']):.2f} s); first read in a fresh process {f['first_snapshot_s']:.2f} s"
    )
    print(
        f"  usage read alone: {usage:.2f} s; plan alone (snapshot + strategies): {plan:.2f} s "
        f"({f['plan_planned']} evictions); without placement prediction {median(f['plan_unpredicted_s']):.2f} s "
        f"({f['plan_unpredicted_planned']} evictions); with the landing guard modelled "
        f"{median(f['plan_guarded_s']):.2f} s ({f['plan_guarded_planned']} evictions)"
    )
    print(
        f"  listing memory: {f['retained_mb']:.0f} MB retained (the result), {f['transient_mb']:.0f} MB more "
        "at the peak of the first read (pages in flight)"
    )
    print(
        f"  baseline (official client, generated models, {base['pods']} pods measured, extrapolated): "
        f"{base_s:.0f} s for the listing alone; ratio {base_s / cycle:.0f}x the full cycle, "
        f"{base_s / snapshot:.0f}x the snapshot"
    )
    missed = [
        what
        for what, ok in (("time", cycle <= 3.0), ("memory", rss <= 1024), ("ratio", base_s / cycle >= 50))
        if not ok
    ]
    verdict = "misses " + ", ".join(missed) if missed else "meets"
    print(f"  target (full cycle <= 3 s and <= 1 GB, >= 50x the baseline): {verdict}")
    return {"pods": pods, "cycle": cycle, "snapshot": snapshot, "usage": usage, "plan": plan, "rss": rss}


def report_paths(pods: int, by_mode: dict[str, list[dict[str, Any]]], by_resources: bool = False) -> None:
    """Each variant's medians over all its children's runs, and each against the first variant; ``by_resources``
    (the variants differ by their resources only): the budget of each set of resources against the first."""
    keys = (
        ("cycle_s", "full cycle", "s"),
        ("snapshot_s", "snapshot", "s"),
        ("client_cpu_s", "client CPU", "s"),
        ("server_cpu_s", "server CPU", "s"),
        ("wire_mb", "on the wire", "MB"),
        ("peak_rss_mb", "peak RSS", "MB"),
        ("usage_s", "usage read", "s"),
        ("plan_s", "plan alone", "s"),
    )
    medians = {
        mode: {
            key: median([v for f in runs for v in (f[key] if isinstance(f[key], list) else [f[key]])])
            for key, _, _ in keys
        }
        for mode, runs in by_mode.items()
    }
    first = next(iter(medians))
    print(f"== {pods} pods, by variant (medians over every run of every child; ratio to {first})")
    for mode, values in medians.items():
        text = "; ".join(
            f"{label} {values[key]:.2f} {unit}{_ratio(values[key], medians[first][key], mode != first)}"
            for key, label, unit in keys
        )
        print(f"  {mode}: {text}")
    if by_resources:
        for mode, values in list(medians.items())[1:]:
            ratio = values["cycle_s"] / medians[first]["cycle_s"]
            ok = ratio <= 1.15 and values["peak_rss_mb"] <= 1024
            print(
                f"  budget for {mode} (full cycle within 15 % of {first}'s and peak RSS <= 1 GB): "
                f"{'meets' if ok else 'misses'} ({ratio:.2f}x, {values['peak_rss_mb']:.0f} MB)"
            )


def _ratio(value: float, base: float, shown: bool) -> str:
    """`` (1.23x)`` against the first mode's figure; a figure too small to measure (a CPU tick) gives no ratio."""
    if not shown:
        return ""
    return f" ({value / base:.2f}x)" if base > 0 else " (n/a)"


def report_scaling(rows: list[dict[str, float]]) -> None:
    print("== scaling (per pod)")
    for row in rows:
        per_pod = {k: row[k] / row["pods"] * 1e6 for k in ("cycle", "snapshot", "usage", "plan")}
        print(
            f"{row['pods']:>7} pods: cycle {per_pod['cycle']:.1f} us/pod (snapshot {per_pod['snapshot']:.1f}, "
            f"usage {per_pod['usage']:.1f}, plan {per_pod['plan']:.1f}); peak RSS {row['rss'] / row['pods'] * 1e3:.2f} KB/pod"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = (last["cycle"] / last["pods"]) / (first["cycle"] / first["pods"])
        print(f"cost per pod at {last['pods']} / at {first['pods']} pods: {growth:.2f} (1.00: linear)")


if __name__ == "__main__":
    main()
