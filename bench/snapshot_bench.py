"""Snapshot benchmark: a synthetic cluster served by the test API server, read by rebalancer's narrow
path and by the official client's default generated-model path, in the same run.

    .venv/bin/python -m bench.snapshot_bench                 # 5,000 nodes, 150,000 pods, 3 runs
    .venv/bin/python -m bench.snapshot_bench --pods 15000 --nodes 500 --runs 1

Every measurement runs in a fresh child process so that its peak RSS is its own; the server runs in
another process (it shares the two cores, as a real API server would). Prints medians and the ratio
between the two paths; this is a benchmark that prints figures, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.harness import kubeconfig, peak_rss_mb, process_cpu_s, run_child, served_cluster

BASELINE_PAGE = 500


# --- child measurements ----------------------------------------------------------------------


def child_snapshot(url: str, server_pid: int) -> dict[str, Any]:
    """One snapshot (nodes, ReplicaSets, pods, budgets) and one plan on it with synthetic usage, with
    the collector paused as the composition root pauses it."""
    from bench.cluster_gen import pod_usage_millicores
    from rebalancer.adapters.kube import KubeSource, connect
    from rebalancer.app.collector import paused
    from rebalancer.domain.model import UsageReport
    from rebalancer.planning.protections import Protections
    from rebalancer.planning.snapshot import build_snapshot
    from rebalancer.policy import parse_policy
    from strategies import build

    policy = parse_policy(
        "pools: {label: node-pool}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
    )
    protections = Protections.from_settings(policy.protections)
    rss_before = peak_rss_mb()
    started = time.perf_counter()
    # page by page, as the raw transfer it is compared with (bench.cycle_bench compares the list modes)
    source = KubeSource(connect(kubeconfig(url)), protections.annotations_read(), list_mode="paged")
    setup_s = time.perf_counter() - started  # the client imports its API modules lazily, here
    started = time.perf_counter()
    with paused():
        facts = source.read_facts()
    first_s = time.perf_counter() - started
    rss_snapshot = peak_rss_mb()
    del facts
    server_cpu, client_cpu = process_cpu_s(server_pid), time.process_time()
    started = time.perf_counter()
    with paused():
        facts = source.read_facts()
    snapshot_s = time.perf_counter() - started
    client_cpu_s, server_cpu_s = time.process_time() - client_cpu, process_cpu_s(server_pid) - server_cpu
    stats = source.last_stats

    # Synthetic usage, skewed by node so that some nodes are hot and some cold.
    skew = {n.name: (0.3, 2.5, 1.0, 1.0)[i % 4] for i, n in enumerate(facts.nodes)}
    pod_usage = {
        p.key: int(pod_usage_millicores(int(p.uid[-12:])) * skew.get(p.node_name or "", 1.0)) for p in facts.pods
    }
    node_usage: dict[str, int] = {n.name: 300 for n in facts.nodes}
    for p in facts.pods:
        if p.node_name in node_usage:
            node_usage[p.node_name] += pod_usage[p.key]
    usage = UsageReport(node_cpu_m=node_usage, pod_cpu_m=pod_usage)
    started = time.perf_counter()
    snapshot = build_snapshot(facts, usage, policy.pools, 0.0)
    plan = build(policy.strategies[0]).plan(snapshot, protections)
    plan_s = time.perf_counter() - started
    hot = sum(1 for d in plan.node_decisions if d.node_class == "hot")
    return {
        "pods": len(facts.pods),
        "nodes": len(facts.nodes),
        "setup_s": setup_s,
        "first_s": first_s,
        "snapshot_s": snapshot_s,
        "client_cpu_s": client_cpu_s,
        "server_cpu_s": server_cpu_s,
        "pages": stats.pages["pods"],
        "rss_before_mb": rss_before,
        "rss_snapshot_mb": rss_snapshot,
        "plan_s": plan_s,
        "rss_total_mb": peak_rss_mb(),
        "hot_nodes": hot,
        "planned": len(plan.evictions),
    }


def child_raw(url: str, server_pid: int) -> dict[str, Any]:
    """The floor: the same pod pages through the official client's transport, bytes only, no decoding."""
    import kubernetes.client
    import kubernetes.config

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig(url), client_configuration=configuration)
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    api.list_node(limit=1, _preload_content=False).release_conn()  # warm the client (lazy imports)
    total = pages = 0
    token = None
    server_cpu = process_cpu_s(server_pid)
    started = time.perf_counter()
    while True:
        response = api.list_pod_for_all_namespaces(limit=BASELINE_PAGE, _continue=token, _preload_content=False)
        body = response.data
        response.release_conn()
        total += len(body)
        pages += 1
        head = body[: body.find(b',"items"')] + b"}"
        token = json.loads(head)["metadata"].get("continue")
        if not token:
            break
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "bytes": total, "pages": pages, "server_cpu_s": process_cpu_s(server_pid) - server_cpu}


def child_baseline(url: str, pods: int) -> dict[str, Any]:
    """The official client's default path: generated V1Pod models, the same pages, first ``pods`` pods."""
    import kubernetes.client
    import kubernetes.config

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig(url), client_configuration=configuration)
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    rss_before = peak_rss_mb()
    held: list[Any] = []
    token = None
    started = time.perf_counter()
    while len(held) < pods:
        page = api.list_pod_for_all_namespaces(limit=BASELINE_PAGE, _continue=token)
        held.extend(page.items)
        token = page.metadata._continue
        if not token:
            break
    return {
        "pods": len(held),
        "seconds": time.perf_counter() - started,
        "rss_before_mb": rss_before,
        "rss_mb": peak_rss_mb(),
    }


# --- parent ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-pods", type=int, default=15_000)
    parser.add_argument("--child", choices=["snapshot", "baseline", "raw"])
    parser.add_argument("--url")
    parser.add_argument("--server-pid", type=int, default=0)
    args = parser.parse_args()
    if args.child == "snapshot":
        print(json.dumps(child_snapshot(args.url, args.server_pid)))
        return
    if args.child == "raw":
        print(json.dumps(child_raw(args.url, args.server_pid)))
        return
    if args.child == "baseline":
        print(json.dumps(child_baseline(args.url, args.baseline_pods)))
        return
    with served_cluster(args.nodes, args.pods) as served:
        print(f"cluster: {args.nodes} nodes, {args.pods} pods (~8.7 KB of JSON each), loaded in {served.load_s:.1f} s")
        report(args, served.url, served.pid)


def child(mode: str, url: str, *extra: str) -> dict[str, Any]:
    return run_child("bench.snapshot_bench", mode, ["--url", url, *extra])


def report(args: argparse.Namespace, url: str, server_pid: int) -> None:
    pid = ["--server-pid", str(server_pid)]
    raw = [child("raw", url, *pid) for _ in range(args.runs)]
    raw_s = statistics.median(r["seconds"] for r in raw)
    print(
        f"raw transfer of the pod pages (official client transport, no decoding), median of {args.runs}: "
        f"{raw_s:.2f} s for {raw[0]['bytes'] / 1e6:.1f} MB in {raw[0]['pages']} pages "
        f"(test API server CPU {statistics.median(r['server_cpu_s'] for r in raw):.2f} s)"
    )
    runs = [child("snapshot", url, *pid) for _ in range(args.runs)]
    base = child("baseline", url, "--baseline-pods", str(args.baseline_pods))
    snap_s = print_snapshot("snapshot (narrow msgspec path)", runs, args.runs)
    first_s = statistics.median(r["first_s"] for r in runs)
    setup_s = statistics.median(r["setup_s"] for r in runs)
    rss = statistics.median(r["rss_snapshot_mb"] for r in runs)
    plan_s = statistics.median(r["plan_s"] for r in runs)
    total_rss = statistics.median(r["rss_total_mb"] for r in runs)
    per_pod_narrow = snap_s / runs[0]["pods"]
    per_pod_base = base["seconds"] / base["pods"]
    scale = args.pods / base["pods"]
    base_rss_extrapolated = base["rss_before_mb"] + (base["rss_mb"] - base["rss_before_mb"]) * scale
    print(
        f"  first read in a fresh process: {first_s:.2f} s, after {setup_s:.2f} s of client start-up "
        "(the kubernetes client imports its API modules lazily)"
    )
    print(
        f"plan on it (LowNodeUtilization, {runs[0]['hot_nodes']} hot nodes, {runs[0]['planned']} evictions "
        f"planned): {plan_s:.2f} s; peak RSS of the whole cycle {total_rss:.0f} MB"
    )
    print(
        f"baseline (official client, generated models) at {base['pods']} pods: {base['seconds']:.2f} s, "
        f"peak RSS {base['rss_mb']:.0f} MB; extrapolated to {args.pods} pods: {per_pod_base * args.pods:.0f} s, "
        f"{base_rss_extrapolated / 1024:.1f} GB"
    )
    print(f"ratio, time per pod (baseline / narrow), same run: {per_pod_base / per_pod_narrow:.0f}x")
    verdict = "meets" if snap_s <= 3.0 and rss <= 1024 else "misses"
    print(f"target (snapshot <= 3 s and <= 1 GB at this size): {verdict}")


def print_snapshot(label: str, runs: list[dict[str, Any]], count: int) -> float:
    """Prints one path's figures; returns its median read time."""
    seconds = statistics.median(r["snapshot_s"] for r in runs)
    each = ", ".join(f"{r['snapshot_s']:.2f}" for r in runs)
    rss = statistics.median(r["rss_snapshot_mb"] for r in runs)
    idle = statistics.median(r["rss_before_mb"] for r in runs)
    print(
        f"{label}, median of {count}: {seconds:.2f} s (runs: {each}); peak RSS {rss:.0f} MB "
        f"({idle:.0f} MB before listing)"
    )

    def cpu(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(
        f"  CPU of that read: client {cpu('client_cpu_s'):.2f} s ({runs[0]['pages']} pod pages), "
        f"test API server {cpu('server_cpu_s'):.2f} s (both on the same cores)"
    )
    return seconds


if __name__ == "__main__":
    main()
