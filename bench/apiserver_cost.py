"""The API server's cost of a full read: rebalancer's read against the community descheduler's one-shot run, on a
real kube-apiserver over etcd 3.4 (Debian's) and over etcd 3.6, bulk-loaded through the API.

For each etcd version a control plane (etcd and kube-apiserver only: no controller or scheduler adds load) is
loaded with ``--nodes`` nodes and ``--pods`` pods (``bench.bulk_load``), then ``--rounds`` rounds alternate, in
one process each: rebalancer's full read in each list mode and encoding (``KubeSource.read_facts``, the read of ``plan`` and
``run --once``; the watch-list only where the server serves it) and the descheduler's one-shot run
(``descheduler --dry-run`` with a LowNodeUtilization policy on requests). Each run reports its wall time, the API
server's and etcd's CPU seconds over the run (Linux /proc), the bytes the API server wrote (its responses), the
client's CPU seconds and its peak RSS. Medians per client and ratios against the descheduler follow.

    python -m bench.apiserver_cost                                   # 1,000 nodes, 30,000 pods, 3 rounds
    python -m bench.apiserver_cost --nodes 20 --pods 300 --rounds 1  # a smoke run
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bulk_load import load
from tests.controlplane.assets import binary
from tests.controlplane.cluster import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
DESCHEDULER_POLICY = """apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: balance
  pluginConfig:
  - name: DefaultEvictor
  - name: LowNodeUtilization
    args:
      thresholds: {cpu: 20, memory: 20, pods: 20}
      targetThresholds: {cpu: 50, memory: 50, pods: 50}
  plugins:
    balance:
      enabled: [LowNodeUtilization]
"""


def io_written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def _high_water_kb(pid: int) -> int:
    """The process's peak resident set so far (VmHWM), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(found[0]) if found else 0


def child_read(variant: str, kubeconfig: str) -> None:
    """One full read as ``plan`` makes it, in this fresh process; prints its figures as JSON.

    ``variant``: ``<list mode>/<encoding>``, e.g. ``cached/protobuf``."""
    from rebalancer.adapters.kube import KubeSource, connect
    from rebalancer.app.collector import paused
    from rebalancer.domain.settings.shared import ProtectionSettings
    from rebalancer.planning.protections import Protections

    annotations = Protections.from_settings(ProtectionSettings()).annotations_read()
    mode, encoding = variant.split("/")
    source = KubeSource(connect(kubeconfig=kubeconfig), annotations, list_mode=mode, encoding=encoding)  # type: ignore[arg-type]
    started = time.monotonic()
    with paused():
        facts = source.read_facts()
    read_s = time.monotonic() - started
    stats = source.last_stats
    modes = sorted({f"{stats.modes[what]}/{stats.encodings[what]}" for what in ("nodes", "pods")})
    print(
        json.dumps({"pods": len(facts.pods), "nodes": len(facts.nodes), "read_as": "+".join(modes), "read_s": read_s})
    )


def run_measured(argv: list[str], plane: ControlPlane) -> dict[str, Any]:
    """Runs ``argv`` to its end; wall, client CPU and peak RSS (wait4), the servers' CPU and bytes written."""
    api, etcd = plane.process("kube-apiserver"), plane.process("etcd")
    api_cpu, etcd_cpu, api_bytes = api.cpu_seconds(), etcd.cpu_seconds(), io_written(api.pid)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu = before.ru_utime + before.ru_stime
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err)
        peak_kb = 0
        while process.poll() is None:  # a child's own ru_maxrss starts at its parent's RSS (kept over exec)
            peak_kb = max(peak_kb, _high_water_kb(process.pid))
            time.sleep(0.02)
        wall = time.monotonic() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if process.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({process.returncode}):\n{stderr[-3000:]}")
    return {
        "wall_s": wall,
        "apiserver_cpu_s": api.cpu_seconds() - api_cpu,
        "etcd_cpu_s": etcd.cpu_seconds() - etcd_cpu,
        "apiserver_wrote_mb": (io_written(api.pid) - api_bytes) / 2**20,
        "client_cpu_s": usage.ru_utime + usage.ru_stime - children_cpu,
        "client_peak_rss_mb": peak_kb / 1024,
        "stdout": stdout,
    }


def ours(mode: str, kubeconfig: Path, plane: ControlPlane) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.apiserver_cost", "--child", mode, "--kubeconfig", str(kubeconfig)]
    figures = run_measured(argv, plane)
    figures.update(json.loads(figures.pop("stdout").strip().splitlines()[-1]))
    return figures


def descheduler(kubeconfig: Path, policy: Path, plane: ControlPlane) -> dict[str, Any]:
    argv = [str(binary("descheduler")), f"--kubeconfig={kubeconfig}", f"--policy-config-file={policy}",
            "--dry-run", "--v=1", "--client-connection-qps=1000", "--client-connection-burst=1000"]  # fmt: skip
    figures = run_measured(argv, plane)
    figures.pop("stdout")
    return figures


VARIANTS = ["cached/protobuf", "cached/json", "paged/protobuf", "paged/json"]
"""The reads measured on every server: list mode / encoding (the first: the defaults)."""
FIELDS = ("wall_s", "apiserver_cpu_s", "etcd_cpu_s", "apiserver_wrote_mb", "client_cpu_s", "client_peak_rss_mb")


def median(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {f: statistics.median(r[f] for r in runs) for f in FIELDS}


def line(label: str, figures: dict[str, float]) -> str:
    return (
        f"figures: {label} wall {figures['wall_s']:.2f} s, apiserver cpu {figures['apiserver_cpu_s']:.2f} s, "
        f"etcd cpu {figures['etcd_cpu_s']:.2f} s, apiserver wrote {figures['apiserver_wrote_mb']:.1f} MB, "
        f"client cpu {figures['client_cpu_s']:.2f} s, client peak rss {figures['client_peak_rss_mb']:.0f} MB"
    )


def bench_etcd(version: str, args: argparse.Namespace, workdir: Path) -> None:
    with ControlPlane(
        workdir / f"etcd-{version}", etcd=version, controllers=False, scheduler=False, audit=False
    ) as plane:  # type: ignore[arg-type]
        loaded = load(plane, args.nodes, args.pods, progress=lambda text: print(f"etcd {version} {text}", flush=True))
        api_rss = int(
            Path(f"/proc/{plane.process('kube-apiserver').pid}/status").read_text().split("VmRSS:")[1].split()[0]
        )
        print(f"figures: etcd {version} loaded {loaded.nodes} nodes, {loaded.replica_sets} ReplicaSets, {loaded.pods} "
              f"pods, {loaded.budgets} budgets in {loaded.seconds:.1f} s ({loaded.per_second:.0f} writes/s); "
              f"apiserver rss {api_rss / 1024:.0f} MB", flush=True)  # fmt: skip
        assert plane.pki is not None
        kubeconfig = plane.kubeconfig(workdir / f"kubeconfig-{version}", plane.pki.admin_token)
        policy = workdir / "descheduler.yaml"
        policy.write_text(DESCHEDULER_POLICY)
        modes = args.variants or [*VARIANTS, *(["watchList/json"] if version == "3.6" else [])]
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in [*modes, "descheduler"]}
        for round_ in range(args.rounds):
            for mode in modes:
                figures = ours(mode, kubeconfig, plane)
                assert figures["pods"] == args.pods, figures
                runs[mode].append(figures)
                print(f"round {round_ + 1} etcd {version} ours-{mode} (read as {figures['read_as']}, "
                      f"the read alone {figures['read_s']:.2f} s): "
                      f"{line('', figures).removeprefix('figures:  ')}", flush=True)  # fmt: skip
            figures = descheduler(kubeconfig, policy, plane)
            runs["descheduler"].append(figures)
            print(f"round {round_ + 1} etcd {version} descheduler: {line('', figures).removeprefix('figures:  ')}",
                  flush=True)  # fmt: skip
        base = median(runs["descheduler"])
        print(line(f"etcd {version} descheduler median of {args.rounds}:", base))
        for mode in modes:
            m = median(runs[mode])
            print(line(f"etcd {version} ours-{mode} median of {args.rounds}:", m))
            ratio = {f: m[f] / base[f] if base[f] else float("nan") for f in FIELDS}
            print(f"figures: etcd {version} ours-{mode} / descheduler: wall {ratio['wall_s']:.2f}x, "
                  f"apiserver cpu {ratio['apiserver_cpu_s']:.2f}x, etcd cpu {ratio['etcd_cpu_s']:.2f}x, "
                  f"apiserver wrote {ratio['apiserver_wrote_mb']:.2f}x, client peak rss {ratio['client_peak_rss_mb']:.2f}x",
                  flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--etcd", action="append", choices=["3.4", "3.6"], help="default: both")
    parser.add_argument("--variant", dest="variants", action="append",
                        help=f"list mode/encoding of our read (repeat; default: {', '.join(VARIANTS)} and, over "
                        "etcd 3.6, watchList/json)")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_read(args.child, args.kubeconfig)
        return
    with tempfile.TemporaryDirectory(prefix="apiserver-cost-") as tmp:
        for version in args.etcd or ["3.4", "3.6"]:
            bench_etcd(version, args, Path(tmp))


if __name__ == "__main__":
    main()
