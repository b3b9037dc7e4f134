"""Predictor benchmark: `rebalancer predict` end to end on a synthetic cluster with 9 days of history in a
real Prometheus (Debian's 2.42, default query limits).

    .venv/bin/python -m bench.predictor_bench                    # 1,000 nodes, 30,000 pods, recording rule
    .venv/bin/python -m bench.predictor_bench --form cadvisor --step 60 --nodes 100 --pods 3000
    .venv/bin/python -m bench.predictor_bench --nodes 20 --pods 200 --step 1800 --no-compact --runs 1
    .venv/bin/python -m bench.predictor_bench --compare-profile-rule   # profiles by range query vs hourly rule

The cluster is served by the test API server in its own process (``bench.serve_cluster``); the history
(``bench.history_gen``) is backfilled with promtool once and cached by its parameters
(``bench.tsdb_build``). Each run is ``predict_live`` in a fresh child process (its peak RSS is its own);
Prometheus' CPU and peak RSS are read from /proc around each run. A sample of pods is then checked: the
daily peaks and hourly profiles Prometheus computes equal numpy's quantile and mean over the generated
samples, and the predictions use them. A mismatch ends the benchmark with an error. With ``--profile-rule``
the profiles come from the hourly rule ``namespace_pod:cpu_usage:avg1h`` (``history.profileRule``) and are
checked against numpy's mean over the generated samples of the hour before each of its samples;
``--compare-profile-rule`` alternates runs without and with it in one session and reports both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.history_gen import (
    PROFILE_RULE,
    RULE,
    Population,
    Shape,
    expected_daily_peaks,
    expected_hourly_profiles,
    expected_profiles,
    population,
)
from bench.snapshot_bench import kubeconfig, process_cpu_s
from bench.tsdb_build import DEFAULT_CACHE, ensure_tsdb, prometheus_on

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 20.0


def policy_yaml(
    shape: Shape,
    prometheus_url: str,
    node_peak: str = "coincident",
    profile_rule: bool = False,
    compressed: bool = False,
) -> str:
    """The policy `rebalancer predict` runs with: default settings but the history's form and the days."""
    # the cadvisor form keeps the default pod query: a subquery over the counters at 5m
    history = f"recordingRule: {RULE}, resolution: {shape.step}s" if shape.form == "rule" else "resolution: 5m"
    if profile_rule:
        history += f", profileRule: {PROFILE_RULE}"
    if compressed:
        history += ", compressedAnswers: true"
    return (
        f"prometheus: {{url: {json.dumps(prometheus_url)}}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
        f"predictor:\n  days: {shape.days - 1}\n  nodePeak: {node_peak}\n  history: {{{history}}}\n"
    )


# --- the child: one `rebalancer predict` -------------------------------------------------------


def child_measure(policy_path: str, config: str, at: float, sample: list[list[str]]) -> dict[str, Any]:
    started = time.perf_counter()
    from rebalancer.app.prediction import predict_live
    from rebalancer.policy import load_policy

    imports_s = time.perf_counter() - started
    policy = load_policy(policy_path)
    queries: list[str] = []
    rss_before = rss_mb(os.getpid(), "VmHWM")
    cpu = time.process_time()
    started = time.perf_counter()
    live = predict_live(policy, config, None, lambda done, total, name: queries.append(name), clock=lambda: at)
    total_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu
    pods = {p.key: p for p in live.prediction.pods}
    sources: dict[str, int] = {}
    for p in live.prediction.pods:
        sources[p.source.value] = sources.get(p.source.value, 0) + 1
    return {
        "total_s": total_s,
        "cpu_s": cpu_s,
        "steps": live.seconds,
        "current_s": live.seconds.get("current usage wait", 0.0),
        "imports_s": imports_s,
        "queries": len(queries),
        "batches": max((int(q.rsplit("/", 1)[1]) for q in queries if q.startswith("history day ")), default=0),
        "description": live.description,
        "current_problem": live.current_problem,
        "current_nodes": len((live.current or {}).get("cpu", {})),
        "rss_before_mb": rss_before,
        "rss_mb": rss_mb(os.getpid(), "VmHWM"),  # not ru_maxrss: Linux carries that over from the parent
        "nodes": len(live.prediction.nodes),
        "hot": len(live.prediction.hot_nodes()),
        "coincident": sum(1 for n in live.prediction.nodes if n.basis == "coincident"),
        "peak_below_sum": sum(
            1
            for n in live.prediction.nodes
            if n.cpu_m is not None and n.pods_cpu_m is not None and n.cpu_m < n.pods_cpu_m + n.system_cpu_m
        ),
        "sources": sources,
        "dropped_history": live.prediction.dropped_history,
        "sample": [
            [p.cpu_m, p.source.value, p.history_days] if (p := pods.get((ns, name))) else None for ns, name in sample
        ],
    }


# --- the parent ---------------------------------------------------------------------------------


@contextlib.contextmanager
def served_cluster(nodes: int, pods: int) -> Iterator[tuple[str, float, int]]:
    """The test API server in its own process: (url, seconds it took to load the objects, pid)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "bench.serve_cluster", "--nodes", str(nodes), "--pods", str(pods)]
    server = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if len(ready) < 3 or ready[0] != "READY":
            raise SystemExit(f"the test API server did not start: {ready}")
        yield ready[1], float(ready[2]), server.pid
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=60)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(pid: int, api_pid: int, argv: list[str]) -> dict[str, Any]:
    """One child run, with Prometheus' CPU seconds and peak RSS over it (the peak is reset first) and the
    test API server's CPU seconds."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM, the peak RSS
    cpu, api_cpu = process_cpu_s(pid), process_cpu_s(api_pid)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"the measured child failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["child_wall_s"] = wall
    result["load"] = [load_before, os.getloadavg()[0]]  # the machine's 1-minute load average before and after
    result["prom_cpu_s"] = process_cpu_s(pid) - cpu
    result["api_cpu_s"] = process_cpu_s(api_pid) - api_cpu
    result["prom_peak_mb"] = rss_mb(pid, "VmHWM")
    return result


def choose_sample(pop: Population, shape: Shape, size: int, seed: int) -> np.ndarray:
    """Served pods: half steady, a quarter created during the window, a quarter hot on some days only (topped
    up with other served pods where a small cluster has too few of a kind)."""
    rng = np.random.default_rng(seed)
    served = np.flatnonzero(pop.served)
    late = pop.first[served] > shape.start
    bursty = ~np.isnan(pop.burst_start[served]).all(axis=1)
    groups = [served[~late & ~bursty], served[late], served[bursty & ~late]]
    wanted = [size - 2 * (size // 4), size // 4, size // 4]
    picked = np.concatenate([rng.choice(g, min(n, g.size), replace=False) for g, n in zip(groups, wanted, strict=True)])
    rest = np.setdiff1d(served, picked)
    extra = rng.choice(rest, min(size - picked.size, rest.size), replace=False)
    return np.sort(np.concatenate([picked, extra]))


def verify(
    shape: Shape, pop: Population, sample: np.ndarray, policy_path: str, config: str, run: dict[str, Any]
) -> str:
    """The sample's daily peaks as read through the history source equal numpy's quantiles over the generated
    samples, and the measured run's predictions of them follow from those peaks. Raises SystemExit if not."""
    from rebalancer.adapters.kube import KubeSource, connect
    from rebalancer.app.prediction import read_history
    from rebalancer.planning.predict.aggregate import aggregate_with
    from rebalancer.planning.protections import Protections
    from rebalancer.policy import load_policy

    policy = load_policy(policy_path)
    protections = Protections.from_settings(policy.protections)
    facts = KubeSource(connect(config), protections.annotations_read()).read_facts()
    history = read_history(policy, facts, shape.at)
    expected = expected_daily_peaks(shape, sample)[:, 1:]  # the first backfilled day is not read
    settings = policy.predictor
    problems: list[str] = []
    checked = 0
    hourly_rule = settings.history.profile_rule is not None
    if settings.node_peak == "coincident":
        if hourly_rule:
            expected_means = expected_hourly_profiles(shape, sample)[:, 1:]
        else:
            expected_means = expected_profiles(shape, sample, settings.profile_buckets)[:, 1:]
        problems, checked = _verify_profiles(pop, sample, history.profiles, expected_means)
    worst = 0.0
    for row, i in enumerate(sample):
        key = (pop.namespace[i], pop.pod[i])
        index = history.pods.index(key)
        got = history.pods.values[index] if index is not None else np.full(expected.shape[1], np.nan)
        want = expected[row]
        if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.allclose(got, want, rtol=1e-6, equal_nan=True):
            problems.append(f"{key}: Prometheus {np.round(got, 3).tolist()}, generated {np.round(want, 3).tolist()}")
            continue
        both = ~np.isnan(want)
        if both.any():
            worst = max(worst, float(np.max(np.abs(got[both] - want[both]) / want[both])))
        measured = run["sample"][row]
        days = int(both.sum())
        if measured is None:
            problems.append(f"{key}: not in the prediction")
            continue
        cpu_m, source, history_days = measured
        if history_days != days:
            problems.append(f"{key}: predicted from {history_days} day(s) of history, {days} generated")
        elif days >= settings.min_history_days:
            aggregated = float(aggregate_with(want[None, :], None, settings)[0])
            if source != "history" or not np.isclose(cpu_m, aggregated, rtol=1e-6):
                problems.append(
                    f"{key}: predicted {cpu_m} m from {source}, {settings.aggregation} of its peaks is {aggregated}"
                )
        elif source == "history":
            problems.append(f"{key}: {days} day(s) of history, below minHistoryDays, yet predicted from history")
    if problems:
        raise SystemExit("CORRECTNESS CHECK FAILED:\n  " + "\n  ".join(problems))
    late = int((pop.first[sample] > shape.start).sum())
    return (
        f"correctness: {len(sample)} sampled pods ({late} created during the window, "
        f"{int((~np.isnan(pop.burst_start[sample])).any(axis=1).sum())} hot on some days only): "
        f"{int((~np.isnan(expected)).sum())} daily peaks equal numpy's quantile over the generated samples "
        f"(largest relative difference {worst:.1e}), {int(np.isnan(expected).sum())} missing days are missing; "
        f"{checked} hourly means equal numpy's mean"
        f"{' of the hour before each hourly rule sample' if hourly_rule else ''}; "
        "their predictions follow from those peaks: OK"
    )


def _verify_profiles(pop: Population, sample: np.ndarray, profiles: Any, expected: np.ndarray) -> tuple[list[str], int]:
    """The sample's profiles as read equal numpy's means per bucket over the generated samples (float32)."""
    if profiles is None:
        return ["no profiles were read (nodePeak: coincident reads them)"], 0
    problems = []
    for row, i in enumerate(sample):
        key = (pop.namespace[i], pop.pod[i])
        index = profiles.index(key)
        got = profiles.values[index] if index is not None else np.full(expected.shape[1:], np.nan)
        want = expected[row]
        if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.allclose(got, want, rtol=1e-5, equal_nan=True):
            problems.append(
                f"{key}: profile differs from the generated means in {int((~np.isclose(got, want, rtol=1e-5, equal_nan=True)).sum())} bucket(s)"
            )
    return problems, int((~np.isnan(expected)).sum())


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--days", type=int, default=9, help="days backfilled; the predictor reads the last days-1")
    parser.add_argument("--form", choices=["rule", "cadvisor"], default="rule")
    parser.add_argument("--step", type=int, default=300, help="seconds between samples (rule interval or scrape)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--node-peak", choices=["coincident", "sum"], default="coincident", help="sum: no profiles are read"
    )
    parser.add_argument(
        "--profile-rule", action="store_true", help=f"read the profiles from the hourly rule {PROFILE_RULE}"
    )
    parser.add_argument(
        "--compare-profile-rule",
        action="store_true",
        help="alternate runs without and with --profile-rule (--runs each) and report both",
    )
    parser.add_argument(
        "--compressed", action="store_true", help="history.compressedAnswers: true (Prometheus gzips its answers)"
    )
    parser.add_argument("--sample", type=int, default=20, help="pods whose daily peaks are checked")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--rebuild", action="store_true", help="backfill again even if cached")
    parser.add_argument("--no-compact", action="store_true", help="keep promtool's 2 h blocks (small sizes)")
    add_child_arguments(parser)
    parser.add_argument("--at", type=float)
    return parser.parse_args()


def add_child_arguments(parser: argparse.ArgumentParser) -> None:
    """What the parent passes to a ``--child measure`` process (:func:`child_measure`)."""
    parser.add_argument("--child", choices=["measure"])
    parser.add_argument("--policy")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--sample-pods")


def main() -> None:
    args = arguments()
    if args.child == "measure":
        sample = json.loads(Path(args.sample_pods).read_text())
        print(json.dumps(child_measure(args.policy, args.kubeconfig, args.at, sample)))
        return
    shape = Shape(args.nodes, args.pods, days=args.days, form=args.form, step=args.step, seed=args.seed)
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=True).stdout
    form = f"recording rule {RULE}" if shape.form == "rule" else "cAdvisor counters, the default subquery"
    _log(
        f"predictor benchmark: {shape.nodes} nodes, {shape.pods} pods; {shape.days} days of history ({form}, "
        f"a sample every {shape.step} s); {version.splitlines()[0]}"
    )
    root, manifest = ensure_tsdb(shape, args.cache, rebuild=args.rebuild, compact=not args.no_compact, log=_log)
    _log(backfill_line(manifest))
    pop = population(shape)
    sample = choose_sample(pop, shape, args.sample, args.seed)
    work = Path(tempfile.mkdtemp(prefix="predictor-bench-"))
    sample_path = work / "sample.json"
    sample_path.write_text(json.dumps([[pop.namespace[i], pop.pod[i]] for i in sample]))
    server = prometheus_on(root).start()
    try:
        with served_cluster(shape.nodes, shape.pods) as (url, load_s, api_pid):
            _log(f"cluster: served by the test API server (its own process), loaded in {load_s:.1f} s")
            pid = server.pid
            assert pid is not None
            config = kubeconfig(url)
            uses = [False, True] if args.compare_profile_rule else [args.profile_rule]
            variants = {}
            for use in uses:
                policy_path = work / f"policy{'-profile-rule' if use else ''}.yaml"
                policy_path.write_text(policy_yaml(shape, server.url, args.node_peak, use, args.compressed))
                variants[_variant(args.node_peak, use)] = policy_path
            idle_mb = rss_mb(pid)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
            for k in range(args.runs):
                for name, policy_path in variants.items():  # alternated: both see the same machine
                    argv = [sys.executable, "-m", "bench.predictor_bench", "--child", "measure"]
                    argv += ["--policy", str(policy_path), "--kubeconfig", config, "--at", str(shape.at)]
                    argv += ["--sample-pods", str(sample_path)]
                    runs[name].append(measure(pid, api_pid, argv))
                    last, load = runs[name][-1], runs[name][-1]["load"]
                    _log(
                        f"  run {k + 1}/{args.runs} ({name}): {last['total_s']:.2f} s "
                        f"(load average {load[0]:.2f} -> {load[1]:.2f})"
                    )
            for name, policy_path in variants.items():
                if len(variants) > 1:
                    print(f"== {name}")
                report(runs[name], idle_mb)
                _log(verify(shape, pop, sample, str(policy_path), config, runs[name][0]))
    finally:
        server.stop()


def _variant(node_peak: str, profile_rule: bool) -> str:
    if node_peak != "coincident":
        return f"nodePeak: {node_peak}"
    return f"nodePeak: coincident, profiles {'from the hourly rule' if profile_rule else 'by range query'}"


def backfill_line(manifest: dict[str, Any]) -> str:
    seconds = manifest["seconds"]
    return (
        f"backfill (not part of the target): {manifest['samples'] / 1e6:.1f} M samples of {manifest['series_pods']} "
        f"pods, {manifest['text_gb']:.1f} GB of OpenMetrics in {manifest['promtool_files']} files: generated in "
        f"{seconds['generate']:.0f} s, promtool done after {seconds['backfill']:.0f} s, compaction "
        f"{seconds['compact']:.0f} s ({manifest['blocks_written']} -> {manifest['blocks']} blocks, "
        f"{manifest['disk_mb']:.0f} MB)"
    )


def _log(text: str) -> None:
    print(text, flush=True)


def report(runs: list[dict[str, Any]], idle_mb: float) -> None:
    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)

    def step(name: str) -> float:
        return statistics.median(r["steps"][name] for r in runs)

    total = median("total_s")
    first = runs[0]
    each = ", ".join(f"{r['total_s']:.2f}" for r in runs)
    totals = [r["total_s"] for r in runs]
    loads = ", ".join(f"{r['load'][0]:.2f}" for r in runs)
    print(
        f"predict_live, median of {len(runs)} fresh processes: {total:.2f} s end to end "
        f"(range {min(totals):.2f}-{max(totals):.2f}; runs: {each}; load average before each: {loads})"
    )
    print(
        f"  cluster list {step('cluster'):.2f} s | history read {step('history'):.2f} s "
        f"({first['queries']} queries, {first['batches']} batch(es) of nodes) | predict {step('predict'):.2f} s | "
        f"current usage read beside the history, then waited {median('current_s'):.2f} s ({first['current_nodes']} nodes"
        f"{'; ' + first['current_problem'] if first['current_problem'] else ''})"
    )
    print(
        f"  the child: peak RSS {median('rss_mb'):.0f} MB ({median('rss_before_mb'):.0f} MB before), "
        f"imports {median('imports_s'):.2f} s before the timed call"
    )
    print(
        f"  Prometheus over the run: CPU {median('prom_cpu_s'):.1f} s, peak RSS {median('prom_peak_mb'):.0f} MB "
        f"(idle {idle_mb:.0f} MB before the runs)"
    )
    cpu = median("cpu_s") + median("prom_cpu_s") + median("api_cpu_s")
    print(
        f"  CPU of the timed call: rebalancer {median('cpu_s'):.1f} s, Prometheus {median('prom_cpu_s'):.1f} s, "
        f"test API server {median('api_cpu_s'):.1f} s: {cpu:.1f} s on {os.cpu_count()} cores, so at least "
        f"{cpu / (os.cpu_count() or 1):.1f} s of wall time on this machine"
    )
    print(
        f"prediction: {first['nodes']} nodes ({first['coincident']} by their coincident peak, "
        f"{first['peak_below_sum']} of them below the sum of their pods' peaks), {first['hot']} predicted hot; "
        f"pods by source {first['sources']}; "
        f"{first['dropped_history']} pods with history gone from the cluster"
    )
    print(f"  {first['description']}")
    verdict = "meets" if total <= TARGET_S else "misses"
    print(f"target (end to end <= {TARGET_S:.0f} s at this size): {verdict}", flush=True)


if __name__ == "__main__":
    main()
