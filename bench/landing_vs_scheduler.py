"""Landing prediction scored against the real kube-scheduler.

    .venv/bin/python -m bench.landing_vs_scheduler [--evictions 120] [--kinds requests,taints,zones,affinity]

On the real control plane (tests/controlplane: etcd, kube-apiserver, controller manager, kube-scheduler and
kubemark hollow nodes) each cluster kind of ``bench.landing_clusters`` is built in turn (one control plane,
reset between kinds) and its Deployments' pods placed by the scheduler. Then, per eviction: the cluster is
read with rebalancer's own adapter (``KubeSource.read_facts``) into a snapshot; ``LandingPredictor``, as
``plan`` builds it (the evicted pod's node hot, every other node a destination with room), states where a
random running pod's replacement will land (``land``: the node, its probability, the landing risk, here the
chance of landing back on its own node) and with what chance on each node (``chances``); the pod is evicted
through the Eviction API; the ReplicaSet's replacement is waited for until bound, and its old pod until gone.

Figures: per cluster kind and in all, the agreement of the most probable node with the scheduler's choice
(and the agreement the model itself expects: the mean of its top probability), the agreement where the
model claims certainty (a probability of 1 with nothing it could not evaluate; target: at least 95 %), the calibration of every node's stated probability
(bucketed, against how often the replacement landed there) and of the stated landing risk (against how
often it landed back); wall time and this process's peak RSS. ``--details FILE`` writes every eviction.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness import peak_rss_mb
from bench.landing_clusters import KINDS, ClusterKind
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.domain.model import Pod, UsageReport
from rebalancer.domain.settings.shared import PoolSettings, ProtectionSettings
from rebalancer.planning.plan import NodeClass
from rebalancer.planning.protections import Protections
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.scheduler_sampling import feasible_nodes_to_find
from rebalancer.planning.snapshot import build_snapshot
from strategies.landing import LandingPredictor
from tests.controlplane.assets import MissingBinary, binary
from tests.controlplane.cluster import ControlPlane
from tests.realcluster.scenario import wait_running

NAMESPACE = "landing"
CERTAIN = 1 - 1e-9
BUCKETS = ((0.0, 0.0), (0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0), (1.0, 1.0))
ROOM = 1 << 40  # every node but the source is a destination with room: the landing risk is landing back


@dataclass(frozen=True)
class Eviction:
    """One eviction: what the model stated before it and where the scheduler bound the replacement."""

    kind: str
    pod: str
    source: str
    chances: dict[str, float]  # node -> stated probability (nodes left out: none)
    predicted: str | None  # the most probable node (first by name among equals)
    top: float
    risk: float  # the stated landing risk: landing back on ``source``
    stated: str  # land()'s reason, as plan prints it
    actual: str | None  # None: not bound within the timeout
    replacement: str | None  # the replacement pod's name
    bound_s: float
    old_present: bool  # the evicted pod still existed (terminating) when the binding was seen
    scores: dict[str, int]  # the model's total weighted score of each feasible node, for --details
    caveat: str  # what the model could not evaluate for the pod ("": nothing; else it claims no certainty)
    requested: dict[str, tuple[int, int, int]]  # per node: CPU (m), memory and pods requested in the snapshot

    @property
    def agrees(self) -> bool:
        return self.actual is not None and self.actual == self.predicted

    @property
    def certain(self) -> bool:
        return self.top >= CERTAIN and not self.caveat


def bucket_of(p: float) -> int:
    if p <= 0:
        return 0
    if p >= CERTAIN:
        return len(BUCKETS) - 1
    return 1 + min(int(p / 0.2), 4)


def bucket_name(b: int) -> str:
    low, high = BUCKETS[b]
    return f"[{low:g}]" if low == high else f"{'(' if low == 0 else '['}{low:g}, {high:g})"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def build(plane: ControlPlane, kind: ClusterKind) -> int:
    """The kind's hollow nodes and Deployments, every pod running; returns the number of pods."""
    for group in kind.nodes:
        plane.hollow_nodes(group.names, labels=group.labels, taints=group.taints)
    plane.namespace(NAMESPACE)
    total = 0
    for workload in kind.workloads:  # one at a time: each placed with the earlier ones running
        plane.admin.create(workload.deployment(NAMESPACE))
        total += workload.replicas
        wait_running(plane, total, NAMESPACE)
    return total


def predict(reader: KubeSource, rng: random.Random) -> tuple[Pod, LandingPredictor, dict[str, Any]]:
    """A random running pod of the snapshot read now, the planner's landing predictor for it, and what the
    details record: the model's score of each feasible node and the requests on each node."""
    facts = reader.read_facts()
    snapshot = build_snapshot(facts, UsageReport(), PoolSettings(label="pool"), time.time())
    pods = sorted(
        (p for p in facts.pods if p.namespace == NAMESPACE and p.node_name and p.phase == "Running"
         and not p.terminating),
        key=lambda p: p.name,
    )  # fmt: skip
    pod = rng.choice(pods)
    assert pod.node_name is not None
    classes = {n: NodeClass.HOT if n == pod.node_name else NodeClass.COLD for n in snapshot.nodes}
    room = {n: ROOM for n in snapshot.nodes if n != pod.node_name}
    seen = {
        "scores": SchedulerModel(snapshot).scores(pod, vacate=True),
        "requested": {n: (x.requested_cpu_m, x.requested_memory, x.pod_count) for n, x in snapshot.load.items()},
    }
    return pod, LandingPredictor(snapshot, classes, room, same_pool=False, max_risk=1.0), seen


def evict_and_follow(
    plane: ControlPlane, pod: Pod, timeout: float = 60.0
) -> tuple[tuple[str, str] | None, float, bool]:
    """Evicts ``pod``; its ReplicaSet's replacement and the node it is bound to (None: none within
    ``timeout``), the seconds from the eviction to that binding, and whether the evicted pod was still there
    (terminating) then. Returns once the old pod is gone and the rest run."""
    admin, app = plane.admin, pod.labels["app"]
    before = {p["metadata"]["name"] for p in admin.items("v1", "Pod", NAMESPACE)}
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.name, "namespace": NAMESPACE}}
    start = time.monotonic()
    admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.name}/eviction", json=body)

    def bound() -> tuple[str, str] | None:
        for p in admin.items("v1", "Pod", NAMESPACE, labelSelector=f"app={app}"):
            if p["metadata"]["name"] not in before and p["spec"].get("nodeName"):
                return str(p["metadata"]["name"]), str(p["spec"]["nodeName"])
        return None

    try:
        actual: tuple[str, str] | None = admin.wait_for(
            f"the replacement of {pod.name} bound", bound, timeout, every=0.05
        )
    except AssertionError:
        actual = None
    seconds = time.monotonic() - start
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.name}"
    old_present = admin.exists(path)
    admin.wait_for(f"{pod.name} gone", lambda: not admin.exists(path), timeout=60)
    if actual is not None:
        wait_running(plane, len(before), NAMESPACE)
    return actual, seconds, old_present


def run_kind(
    plane: ControlPlane, kind: ClusterKind, evictions: int, rng: random.Random, kubeconfig: Path
) -> list[Eviction]:
    started = time.monotonic()
    pods = build(plane, kind)
    print(f"== {kind.name} ({kind.what}): {len(kind.node_names)} nodes, {len(kind.workloads)} Deployments, "
          f"{pods} pods, placed in {time.monotonic() - started:.1f} s; not modelled: {kind.unmodelled or 'nothing'}",
          flush=True)  # fmt: skip
    annotations = Protections.from_settings(ProtectionSettings()).annotations_read()
    reader = KubeSource(connect(kubeconfig=str(kubeconfig)), annotations)
    done = []
    for _ in range(evictions):
        pod, predictor, seen = predict(reader, rng)
        assert pod.node_name is not None
        landing = predictor.land(pod, pod.node_name, 0)
        chances = predictor.chances(pod, pod.node_name)
        predicted = min(chances, key=lambda n: (-chances[n], n)) if chances else None
        replaced, seconds, old_present = evict_and_follow(plane, pod)
        replacement, actual = replaced or (None, None)
        done.append(Eviction(kind.name, pod.name, pod.node_name, chances, predicted,
                             chances.get(predicted, 0.0) if predicted else 0.0, landing.risk, landing.reason,
                             actual, replacement, seconds, old_present, caveat=landing.caveat, **seen))  # fmt: skip
        if not done[-1].agrees:
            e = done[-1]
            print(f"  miss: {kind.name} {e.pod} from {e.source}: predicted {e.predicted} ({pct(e.top, 1)}), "
                  f"landed on {e.actual} (stated {pct(e.chances.get(e.actual or '', 0.0), 1)})", flush=True)  # fmt: skip
    return done


def report(name: str, evictions: Sequence[Eviction]) -> None:
    """Prints one summary's figures."""
    n = len(evictions)
    agree = sum(e.agrees for e in evictions)
    certain = [e for e in evictions if e.certain]
    certain_agree = sum(e.agrees for e in certain)
    back = sum(e.actual == e.source for e in evictions)
    expected = sum(e.top for e in evictions)
    median = statistics.median(e.bound_s for e in evictions) if evictions else 0.0
    terminating = sum(e.old_present for e in evictions)
    print(f"{name}: {n} evictions, agreement {agree}/{n} ({pct(agree, n)}), expected by the model "
          f"{pct(expected, n)}; claimed certain {certain_agree}/{len(certain)} ({pct(certain_agree, len(certain))}); "
          f"landed back {back}/{n} ({pct(back, n)}), stated risk {pct(sum(e.risk for e in evictions), n)}; "
          f"replacement bound in {median:.2f} s median, the evicted pod still terminating then {terminating}/{n}")  # fmt: skip
    chances = [(e.chances.get(node, 0.0), e.actual == node) for e in evictions for node in KINDS[e.kind].node_names]
    _calibration(f"calibration {name}", "node chances", "landed", chances)
    _calibration(
        f"landing risk {name}", "evictions", "landed back", [(e.risk, e.actual == e.source) for e in evictions]
    )


def _calibration(prefix: str, what: str, outcome: str, pairs: Sequence[tuple[float, bool]]) -> None:
    """One line per non-empty bucket of stated probabilities: how many, their mean, how often it happened."""
    for b in range(len(BUCKETS)):
        inside = [(p, hit) for p, hit in pairs if bucket_of(p) == b]
        if inside:
            hits, mean = sum(hit for _, hit in inside), sum(p for p, _ in inside) / len(inside)
            print(f"  {prefix} {bucket_name(b)}: {len(inside)} {what}, stated {100 * mean:.1f} %, "
                  f"{outcome} {hits} ({pct(hits, len(inside))})")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evictions", type=int, default=120, help="in all, shared evenly by the kinds")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--details", type=Path, help="write every eviction as JSON to this file")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    if unknown := [k for k in kinds if k not in KINDS]:
        parser.error(f"--kinds: unknown {', '.join(unknown)} (known: {', '.join(KINDS)})")
    if args.evictions < len(kinds):
        parser.error(f"--evictions {args.evictions}: at least one per kind ({len(kinds)})")
    try:
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubemark"):
            binary(name)
    except MissingBinary as missing:
        print(f"the real control plane is not available: {missing}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    share = [args.evictions // len(kinds) + (i < args.evictions % len(kinds)) for i in range(len(kinds))]
    started = time.monotonic()
    results: dict[str, list[Eviction]] = {}
    with tempfile.TemporaryDirectory(prefix="landing-bench-") as scratch, ControlPlane(Path(scratch)) as plane:
        plane_s = time.monotonic() - started
        assert plane.pki is not None
        kubeconfig = plane.kubeconfig(Path(scratch) / "bench.kubeconfig", plane.pki.admin_token)
        version = plane.admin.get("/version")["gitVersion"]
        print(f"landing prediction vs kube-scheduler {version}: {len(kinds)} cluster kinds, {args.evictions} "
              f"evictions, seed {args.seed}; control plane up in {plane_s:.1f} s", flush=True)  # fmt: skip
        for i, (name, count) in enumerate(zip(kinds, share, strict=True)):
            if i:
                plane.reset()
            results[name] = run_kind(plane, KINDS[name], count, rng, kubeconfig)
    wall = time.monotonic() - started
    every = [e for name in kinds for e in results[name]]
    print("== figures")
    for name in kinds:
        report(name, results[name])
    report("all", every)
    largest = max(len(KINDS[name].node_names) for name in kinds)
    print(f"percentageOfNodesToScore: at most {largest} nodes, under 100: the scheduler scores every feasible "
          f"node (the model samples {feasible_nodes_to_find(largest, None)} of {largest}): sampling plays no part")  # fmt: skip
    for what, chosen in (("", every), (", kinds it models fully", [e for e in every if not KINDS[e.kind].unmodelled])):
        certain = [e for e in chosen if e.certain]
        agreed = sum(e.agrees for e in certain)
        verdict = "meets" if agreed >= 0.95 * len(certain) else "misses"
        print(f"target (agreement where the model claims certainty >= 95 %{what}): {verdict} "
              f"({agreed}/{len(certain)}, {pct(agreed, len(certain))})")  # fmt: skip
    evicting = sum(e.bound_s for e in every)
    print(f"wall time: {wall:.1f} s (control plane {plane_s:.1f} s; eviction to bound {evicting:.1f} s in all); "
          f"peak RSS {peak_rss_mb():.0f} MB (this process)")  # fmt: skip
    if args.details:
        args.details.write_text(json.dumps([asdict(e) for e in every], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
