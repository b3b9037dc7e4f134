"""The benchmarks run at a tiny size and print their figures (a smoke test: no timing assertions).

Each runs as a user would run it (``python -m bench.<name>``) in a subprocess, with the test API server
and the canned Prometheus in processes of their own; the figures lines are parsed, so a benchmark that
stops printing one of them, or prints nonsense, fails here rather than on the day it is needed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECONDS = r"(\d+\.\d+) s"


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def figure(pattern: str, text: str) -> list[str]:
    found = re.search(pattern, text)
    assert found is not None, f"no line matching {pattern!r} in:\n{text}"
    return list(found.groups())


def test_snapshot_bench_prints_its_figures() -> None:
    out = run(
        "bench.snapshot_bench",
        *("--nodes", "50", "--pods", "1500", "--runs", "1", "--baseline-pods", "100"),
    )

    assert figure(r"cluster: (\d+) nodes, (\d+) pods", out) == ["50", "1500"]
    transfer, megabytes, pages = figure(rf"raw transfer .*: {SECONDS} for (\d+\.\d+) MB in (\d+) pages", out)
    assert float(transfer) > 0 and 1500 * 8 / 1000 < float(megabytes) < 1500 * 10 / 1000 and pages == "3"
    assert float(figure(rf"snapshot \(narrow msgspec path\), median of 1: {SECONDS}", out)[0]) > 0
    client, pod_pages, server = figure(
        rf"CPU of that read: client {SECONDS} \((\d+) pod pages\), test API server {SECONDS}", out
    )
    assert float(client) > 0 and pod_pages == "3" and float(server) >= 0
    hot, planned, plan = figure(
        rf"plan on it \(LowNodeUtilization, (\d+) hot nodes, (\d+) evictions planned\): {SECONDS}", out
    )
    assert int(hot) >= 0 and int(planned) >= 0 and float(plan) >= 0
    base_pods, base_s = figure(rf"baseline \(official client, generated models\) at (\d+) pods: {SECONDS}", out)
    assert base_pods == "500" and float(base_s) > 0  # one page of the server's
    assert int(figure(r"ratio, time per pod .*: (\d+)x", out)[0]) > 0
    assert figure(r"target \(.*\): (meets|misses)", out)[0] in ("meets", "misses")


def test_cycle_bench_prints_its_figures_for_each_size() -> None:
    out = run(
        "bench.cycle_bench",
        *("--sizes", "300,1200", "--runs", "1", "--baseline-pods", "100", "--list-modes", "watchList,paged"),
    )

    sizes = re.findall(r"== (\d+) pods on (\d+) nodes \((\d+) pod usage series\), listMode (\w+)", out)
    assert sizes == [(p, n, p, mode) for p, n in (("300", "10"), ("1200", "40")) for mode in ("watchList", "paged")]
    cycles = re.findall(rf"full cycle: {SECONDS} .*peak RSS (\d+) MB; (\d+) hot nodes, (\d+) evictions planned", out)
    assert len(cycles) == 4
    # planned may be 0: with placement prediction, most replacements on this synthetic cluster (each node's pods
    # request alike, a quarter of the nodes hot) risk landing back or on hot and normal nodes
    assert all(float(s) > 0 and int(rss) > 0 and int(hot) > 0 and int(planned) >= 0 for s, rss, hot, planned in cycles)
    snapshots = re.findall(
        rf"snapshot alone: {SECONDS} \(pods read by (\w+), (\d+) requests; client CPU {SECONDS}, (\d+) MB on the wire; "
        rf"test API server CPU",
        out,
    )
    assert [s[1] for s in snapshots] == ["watchList", "paged"] * 2
    assert all(float(client) > 0 and int(wire) >= 0 for _, _, _, client, wire in snapshots)
    compared = re.findall(r"  (watchList|paged): full cycle (\d+\.\d+) s.*on the wire (\d+\.\d+) MB", out)
    assert [c[0] for c in compared] == ["watchList", "paged"] * 2
    assert len(re.findall(r"snapshot \d+\.\d+ s \((\d+\.\d+)x\); client CPU", out)) == 2  # paged against watchList
    plans = re.findall(
        rf"usage read alone: {SECONDS}; plan alone \(snapshot \+ strategies\): {SECONDS} \((\d+) evictions\); "
        rf"without placement prediction {SECONDS} \((\d+) evictions\); "
        rf"with the landing guard modelled {SECONDS} \((\d+) evictions\)",
        out,
    )
    # with the guard's mark modelled on the hot nodes, their replacements land elsewhere: pods move
    assert len(plans) == 4 and all(int(unpredicted) > 0 and int(guarded) > 0 for *_, unpredicted, _, guarded in plans)
    assert len(re.findall(r"listing memory: -?\d+ MB retained \(the result\), -?\d+ MB more", out)) == 4
    assert len(re.findall(r"ratio (\d+)x the full cycle, (\d+)x the snapshot", out)) == 4
    assert (
        len(
            re.findall(r"target \(full cycle <= 3 s and <= 1 GB, >= 50x the baseline\): (meets|misses [a-z, ]+)\n", out)
        )
        == 4
    )
    per_pod = re.findall(
        r"(\d+) pods: cycle (\d+\.\d+) us/pod \(snapshot (\d+\.\d+), usage (\d+\.\d+), plan (\d+\.\d+)\)", out
    )
    assert [p[0] for p in per_pod] == ["300", "300", "1200", "1200"]
    assert float(figure(r"cost per pod at 1200 / at 300 pods: (\d+\.\d+)", out)[0]) > 0


def test_cycle_bench_compares_memory_and_pod_thresholds_with_cpu_alone() -> None:
    out = run(
        "bench.cycle_bench",
        *("--sizes", "1200", "--runs", "1", "--baseline-pods", "100"),
        *("--resources", "cpu", "--resources", "pods,memory,cpu"),
    )

    sizes = re.findall(r"== 1200 pods on 40 nodes \((.*)\), listMode auto, thresholds on ([a-z,]+), medians of 1", out)
    assert sizes == [
        ("1200 pod usage series", "cpu"),
        ("1200 pod usage series, 40 node memory series", "cpu,memory,pods"),
    ]
    hot = [int(h) for h in re.findall(r"full cycle: .*; (\d+) hot nodes", out)]
    assert hot == [10, 15]  # a quarter of the nodes hot on CPU; an eighth more on memory alone
    guarded = re.findall(r"with the landing guard modelled \d+\.\d+ s \((\d+) evictions\)", out)
    assert len(guarded) == 2 and all(int(g) > 0 for g in guarded)
    assert re.search(r"  cpu,memory,pods: full cycle \d+\.\d+ s \(\d+\.\d+x\).*usage read \d+\.\d+ s \(", out), out
    assert re.search(
        r"budget for cpu,memory,pods \(full cycle within 15 % of cpu's and peak RSS <= 1 GB\): (meets|misses) "
        r"\(\d+\.\d+x, \d+ MB\)",
        out,
    ), out


def test_cycle_bench_refuses_resources_without_cpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cycle_bench", "--resources", "memory"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert done.returncode == 2 and "--resources 'memory': cpu and optionally memory, pods" in done.stderr


def test_kube_list_prints_its_figures() -> None:
    out = run("bench.kube_list", "1000", "300")

    assert int(figure(r"page of 500 pods: \d+\.\d+ MB \((\d+) bytes per pod\)", out)[0]) > 1000
    assert len(re.findall(rf"decode 1,000 pods \(gc (?:enabled|paused)\): {SECONDS}", out)) == 2
    assert figure(r"read_facts over loopback, ([\d,]+) pods and 10 nodes, medians of 3", out)[0] == "300"
    for mode in ("watchList", "paged"):
        wall, cpu, wire = figure(rf"  {mode}: {SECONDS} wall, {SECONDS} client CPU, (\d+) MB on the wire", out)
        assert float(wall) > 0 and float(cpu) > 0 and int(wire) > 0
    assert int(figure(r"peak RSS: (\d+) MB", out)[0]) > 0
