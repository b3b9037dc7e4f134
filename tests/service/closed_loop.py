"""A cluster that answers rebalancer's evictions: the test API server, a ReplicaSet controller with a
default-like scheduler, and cAdvisor-shaped usage that follows each pod to its node, written into a real
Prometheus on a virtual clock.

* Time is virtual: cycles run at chosen instants of :attr:`ClosedLoop.clock`, samples are appended at the
  kubelet's 30 s scrape interval up to that instant through Prometheus' remote-write receiver, and every
  query is evaluated at the cycle's ``now``. Ten minutes of the shipped policy's usage window pass in a
  few seconds, and the policy keeps its own durations.
* Each pod is the only replica of its ReplicaSet. When a pod is evicted (as the test API server
  records it), :meth:`ClosedLoop.reconcile` creates the replacement at once and binds it where the default
  scheduler would put it (:func:`schedule`); its container starts :data:`STARTUP` seconds after the
  eviction. The evicted pod's load leaves its node at the eviction and runs on the replacement's node
  from the start.
* The truth: a node's CPU at an instant is its system daemons plus the pods running on it
  (:meth:`ClosedLoop.cores`); what the planner reads is Prometheus' P95 of it over the window.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.adapters.cadvisor import METRIC, PodCgroups, node_labels
from tests.adapters.prom_fixture import Series
from tests.adapters.remote_write import remote_write
from tests.fake_clock import FakeClock
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

SCRAPE = 30.0  # the kubelet's scrape interval in kube-prometheus
STARTUP = 5.0  # a replacement's container runs this long after the eviction of the pod it replaces
PAUSE_CORES = 0.002
NAMESPACE = "shop"
REQUEST_CPU_M, REQUEST_MEMORY_GI = 500, 2  # every pod's requests: flat, whatever its real usage
GUARD_KEY = "rebalancer.io/landing-guard"


@dataclass(frozen=True)
class NodeLoad:
    name: str
    cores: int
    system: float
    pods: tuple[float, ...]  # the real CPU of each pod on it at the start, in cores


@dataclass
class RunningPod:
    name: str
    workload: str
    node: str
    cores: float
    start: float
    uid: str
    end: float = math.inf

    def alive(self, at: float) -> bool:
        return self.start <= at < self.end

    def used(self, at: float) -> float:
        """Core-seconds used up to ``at``: its container's counter."""
        return self.cores * max(0.0, min(at, self.end) - self.start)


@dataclass(frozen=True)
class Eviction:
    at: float
    pod: str
    node: str
    cores: float
    replacement_node: str


@dataclass
class ClosedLoop:
    server: TestApiServer
    prometheus_url: str
    layout: Sequence[NodeLoad]
    start: float  # the first sample; history runs from here to the first cycle
    clock: FakeClock = field(init=False)
    pods: list[RunningPod] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    _written: float = field(default=-math.inf)
    _seen_records: int = 0

    def __post_init__(self) -> None:
        self.clock = FakeClock(self.start)
        self.nodes = {n.name: n for n in self.layout}
        for node in self.layout:
            self.server.add(b.node(node.name, cpu=str(node.cores), memory=f"{4 * node.cores}Gi"))
            for index, cores in enumerate(node.pods):
                workload = f"svc-{node.name.removeprefix('node-')}-{index}"
                self.server.add(
                    b.deployment(workload, NAMESPACE, replicas=1),
                    b.replica_set(f"{workload}-5f7d8", NAMESPACE, deployment=workload, replicas=1),
                )
                self._start_pod(workload, node.name, cores, self.start - 3600)
        self.server.disruption.sync_all()

    # -- the truth ---------------------------------------------------------------------------

    def running(self, node: str, at: float | None = None) -> list[RunningPod]:
        at = self.clock.now if at is None else at
        return [p for p in self.pods if p.node == node and p.alive(at)]

    def cores(self, node: str, at: float | None = None) -> float:
        """The node's real CPU at ``at`` (now by default): system daemons, pods and their pause containers."""
        return self.nodes[node].system + sum(p.cores + PAUSE_CORES for p in self.running(node, at))

    def percent(self, node: str, at: float | None = None) -> float:
        return 100.0 * self.cores(node, at) / self.nodes[node].cores

    def fewest_evictions(self, node: str, target: float) -> int:
        """The fewest pods (the heaviest first) whose eviction brings ``node`` under ``target`` percent now."""
        left = self.cores(node)
        limit = target / 100 * self.nodes[node].cores
        count = 0
        for pod in sorted(self.running(node), key=lambda p: -p.cores):
            if left < limit:
                break
            left -= pod.cores + PAUSE_CORES
            count += 1
        return count

    # -- the kubelet, scraped ----------------------------------------------------------------

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, writing every scrape up to it into Prometheus."""
        first = self.start if self._written == -math.inf else self._written + SCRAPE
        stamps = [first + i * SCRAPE for i in range(int((to - first) // SCRAPE) + 1)]
        if stamps:
            remote_write(self.prometheus_url, self._series(stamps))
            self._written = stamps[-1]
        self.clock.now = to

    def _series(self, stamps: Sequence[float]) -> list[Series]:
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}

        def put(labels: Mapping[str, str], at: float, value: float, name: str = METRIC) -> None:
            samples.setdefault((name, tuple(sorted(labels.items()))), []).append((at, value))

        for at in stamps:
            for node in self.layout:
                base = node_labels(node.name)
                on_node = [p for p in self.pods if p.node == node.name]
                # the root cgroup counts since the node booted (an hour before the history starts)
                root = node.system * (at - self.start + 3600)
                root += sum(p.used(at) + PAUSE_CORES * max(0.0, min(at, p.end) - p.start) for p in on_node)
                put({**base, "id": "/"}, at, root)
                allocatable = {"job": "kube-state-metrics", "node": node.name, "resource": "cpu", "unit": "core"}
                put(allocatable, at, float(node.cores), "kube_node_status_allocatable")
                for pod in (p for p in on_node if p.alive(at)):
                    cgroups = PodCgroups.of(base, NAMESPACE, pod.name, pod.uid, ("app",))
                    pause = PAUSE_CORES * (at - pod.start)
                    put(cgroups.containers[0], at, pod.used(at))
                    put(cgroups.pause, at, pause)
                    put(cgroups.whole, at, pod.used(at) + pause)
        return [Series(name, dict(labels), points) for (name, labels), points in samples.items()]

    # -- the ReplicaSet controller and the scheduler -----------------------------------------

    def reconcile(self) -> list[Eviction]:
        """Replace every pod evicted since the last call (as the API server recorded the evictions)."""
        now = self.clock.now
        records = self.server.eviction.records[self._seen_records :]
        self._seen_records += len(records)
        done = []
        for record in records:
            if record.code != 201 or record.dry_run:
                continue
            gone = next(p for p in self.pods if p.name == record.name and p.end == math.inf)
            gone.end = now
            node = schedule(self.server.store.objects("nodes"), self._requested())
            self._start_pod(gone.workload, node, gone.cores, now + STARTUP, created=now)
            done.append(Eviction(now, gone.name, gone.node, gone.cores, node))
        self.evictions += done
        return done

    def _requested(self) -> dict[str, int]:
        """Node -> pods bound to it in the API server (every pod requests the same)."""
        counts = dict.fromkeys(self.nodes, 0)
        for pod in self.server.store.objects("pods", NAMESPACE):
            counts[pod["spec"]["nodeName"]] += 1
        return counts

    def _start_pod(self, workload: str, node: str, cores: float, start: float, created: float | None = None) -> None:
        replica_set = f"{workload}-5f7d8"
        name = f"{replica_set}-{hashlib.sha1(f'{workload}@{start}'.encode()).hexdigest()[:5]}"
        manifest = b.pod(
            name, namespace=NAMESPACE, node=node, owners=[b.owner("ReplicaSet", replica_set)],
            labels={"app": workload}, created=_rfc3339(start if created is None else created),
            containers=[b.container(cpu=f"{REQUEST_CPU_M}m", memory=f"{REQUEST_MEMORY_GI}Gi")],
        )  # fmt: skip
        self.server.add(manifest)
        self.pods.append(RunningPod(name, workload, node, cores, start, manifest["metadata"]["uid"]))

    # -- what the landing guard left on the nodes ---------------------------------------------

    def api_view(self) -> tuple[set[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
        """The pods (namespace, name) in the API server, and each node's taints (key, value)."""
        pods = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.server.store.objects("pods")}
        taints = {
            n["metadata"]["name"]: sorted((t["key"], t.get("value", "")) for t in n["spec"].get("taints") or [])
            for n in self.server.store.objects("nodes")
        }
        return pods, taints

    def marks(self) -> dict[str, str]:
        """Node -> the reason of its landing-guard taint (hot, relieved), for the nodes that carry one."""
        found = {}
        for node in self.server.store.objects("nodes"):
            for taint in node["spec"].get("taints") or []:
                if taint["key"] == GUARD_KEY:
                    found[node["metadata"]["name"]] = taint.get("value", "")
        return found


def schedule(nodes: Iterable[dict[str, Any]], pods_on: Mapping[str, int]) -> str:
    """Where the default scheduler binds a pod of this cluster (every pod requests 500m and 2Gi, tolerates
    no taint, has no affinity, and is the only replica of its workload, so spreading never differs):

    filters: cordon, NoSchedule / NoExecute taints, CPU, memory and pod-count fit; scores:
    NodeResourcesFit LeastAllocated (CPU and memory averaged, weight 1), BalancedAllocation (equal
    here: requests are proportional to capacity), TaintToleration (PreferNoSchedule taints, normalized
    in reverse, weight 3). Ties go to the first node by name (the scheduler draws one at random)."""
    feasible: list[tuple[str, int, int]] = []  # (node, LeastAllocated score, PreferNoSchedule taints)
    for node in nodes:
        name, spec, allocatable = node["metadata"]["name"], node["spec"], node["status"]["allocatable"]
        taints = spec.get("taints") or []
        if spec.get("unschedulable") or any(t["effect"] in ("NoSchedule", "NoExecute") for t in taints):
            continue
        cpu_m, memory_gi = int(allocatable["cpu"]) * 1000, int(allocatable["memory"].removesuffix("Gi"))
        count = pods_on.get(name, 0) + 1  # with the pod
        cpu_m_used, memory_gi_used = count * REQUEST_CPU_M, count * REQUEST_MEMORY_GI
        if cpu_m_used > cpu_m or memory_gi_used > memory_gi or count > int(allocatable["pods"]):
            continue
        least = ((cpu_m - cpu_m_used) * 100 // cpu_m + (memory_gi - memory_gi_used) * 100 // memory_gi) // 2
        feasible.append((name, least, sum(1 for t in taints if t["effect"] == "PreferNoSchedule")))
    if not feasible:
        raise AssertionError("the replacement fits on no node: the scenario is too full")
    most = max(untolerated for _, _, untolerated in feasible)

    def score(entry: tuple[str, int, int]) -> tuple[int, str]:
        name, least, untolerated = entry
        taint_score = 100 - untolerated * 100 // most if most else 100
        return -(least + 3 * taint_score), name

    return min(feasible, key=score)[0]


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
