"""An imported descheduler policy plans, on a cluster made through a real API server by api_made.py (priorities
through PriorityClasses, volumes, DaemonSet pods, excluded namespaces) with its usage in a real Prometheus, the
evictions the descheduler's documented rules make.

The expected pods are worked out by hand from the descheduler's README: utilization is the pods' requests
over allocatable; LowNodeUtilization evicts from nodes above targetThresholds (any resource) to nodes below
thresholds (every resource), pod by pod, until the node is under target; HighNodeUtilization evicts the pods
of the nodes below thresholds, when more than numberOfNodes are; the DefaultEvictor passes over DaemonSet
pods, pods with local storage or a PVC when told, pods at or above priorityThreshold, pods outside
labelSelector and pods of excluded namespaces. Memory requests and pod counts stay far below every
threshold here, so the CPU alone decides (memory and pods carry over but select nothing). Real usage is set against the
requests, to show that it plays no part.
"""

from __future__ import annotations

from pathlib import Path

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.app.cli import main
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import StartPrometheus
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made

DATA = Path(__file__).resolve().parents[1] / "data" / "descheduler"
END = 1_700_000_000.0
RS = "shop-6c9f4"
PVC = {"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}}
EMPTY_DIR = {"name": "scratch", "emptyDir": {}}


def add_pod(plane: ControlPlane, name: str, node: str, cpu: str, *, namespace: str = "shop", **extra: object) -> None:
    kind, owner_name = ("DaemonSet", "exporter") if name.startswith("exporter") else ("ReplicaSet", RS)
    api_made.add(
        plane,
        b.pod(name, namespace=namespace, node=node, owners=[b.owner(kind, owner_name)],
              containers=[b.container(cpu=cpu, memory="128Mi")], **extra)
    )  # fmt: skip


def import_policy(fixture: str, history: CadvisorHistory, start: StartPrometheus, tmp: Path) -> Path:
    """The fixture imported, with a Prometheus holding ``history`` and the state namespace added."""
    prometheus = start(history.series())
    policy = tmp / "imported.yaml"
    assert main(["import-policy", str(DATA / fixture), "--out", str(policy)]) == 0
    with policy.open("a") as file:
        file.write(f"prometheus: {{url: '{prometheus.url}', maxDataAge: 10m}}\nstate: {{namespace: rebalancer}}\n")
    return policy


def plan_imported(
    fixture: str, plane: ControlPlane, api_kubeconfig: Path, history: CadvisorHistory, start: StartPrometheus, tmp: Path
) -> EvictionPlan:
    policy = import_policy(fixture, history, start, tmp)
    outcome = app.plan_live(
        app.connect_runtime(load_policy(policy), app.ClusterConnection(str(api_kubeconfig)), clock=lambda: END)
    )
    assert outcome.plan.blocked is None
    return outcome.plan


def history(nodes: tuple[str, ...], pods: dict[tuple[str, str], tuple[str, float]]) -> CadvisorHistory:
    return CadvisorHistory(
        nodes=tuple(NodeSpec(n, 0.2) for n in nodes),
        pods=tuple(PodSpec(ns, name, node, (Container("app", constant(c)),)) for (ns, name), (node, c) in pods.items()),
        start=END - 3600,
        end=END,
    )


def test_low_node_utilization_evicts_what_the_descheduler_would(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # thresholds cpu 20, targetThresholds cpu 50 (nodes of 4 cores: cold below 800m, hot above 2000m requested);
    # DefaultEvictor: ignorePvcPods, no local storage, priorityThreshold 10000; kube-system and monitoring excluded
    nodes = ("hot-a", "normal-b", "cold-c", "cold-d")
    for name in nodes:
        api_made.add(api_cluster, b.node(name, cpu="4", memory="16Gi"))
    api_made.add(
        api_cluster, b.deployment("shop", "shop", replicas=8), b.replica_set(RS, "shop", deployment="shop", replicas=8)
    )
    # hot-a requests 3500m (87.5%): 1500m above target
    add_pod(api_cluster, "api-0", "hot-a", "1000m")
    add_pod(api_cluster, "api-1", "hot-a", "1000m")
    add_pod(api_cluster, "db-0", "hot-a", "800m", volumes=[PVC])  # ignorePvcPods
    add_pod(api_cluster, "cache-0", "hot-a", "300m", volumes=[EMPTY_DIR])  # evictLocalStoragePods false
    add_pod(api_cluster, "critical-0", "hot-a", "200m", priority=20000)  # at or above priorityThreshold
    add_pod(api_cluster, "coredns-0", "hot-a", "100m", namespace="kube-system")  # excluded namespace
    add_pod(api_cluster, "exporter-a", "hot-a", "100m", namespace="monitoring")  # DaemonSet, excluded namespace
    # normal-b requests 1400m (35%) but really uses 3.8 cores; the cold nodes request 400m and 200m
    add_pod(api_cluster, "web-0", "normal-b", "1400m")
    add_pod(api_cluster, "web-1", "cold-c", "400m")
    add_pod(api_cluster, "web-2", "cold-d", "200m")
    usage = {
        ("shop", "api-0"): ("hot-a", 0.1), ("shop", "api-1"): ("hot-a", 0.1), ("shop", "db-0"): ("hot-a", 0.1),
        ("shop", "cache-0"): ("hot-a", 0.05), ("shop", "critical-0"): ("hot-a", 0.05),
        ("kube-system", "coredns-0"): ("hot-a", 0.05), ("monitoring", "exporter-a"): ("hot-a", 0.05),
        ("shop", "web-0"): ("normal-b", 3.6), ("shop", "web-1"): ("cold-c", 0.1), ("shop", "web-2"): ("cold-d", 0.1),
    }  # fmt: skip

    plan = plan_imported(
        "v1alpha2-low-node-utilization.yaml",
        api_cluster,
        api_kubeconfig,
        history(nodes, usage),
        start_prometheus,
        tmp_path,
    )

    classes = {d.node: d.node_class for d in plan.results[0].node_decisions}
    assert classes == {"hot-a": NodeClass.HOT, "normal-b": NodeClass.NORMAL,
                       "cold-c": NodeClass.COLD, "cold-d": NodeClass.COLD}  # fmt: skip
    # the descheduler evicts api-0 (3500m -> 2500m, still above 2000m), then api-1 (1500m): under target
    assert sorted(e.name for e in plan.evictions) == ["api-0", "api-1"]
    assert {e.room_on for e in plan.evictions} <= {"cold-c", "cold-d"}
    passed = {d.name for d in plan.results[0].pod_decisions if not d.chosen}
    assert {"db-0", "cache-0", "critical-0", "coredns-0", "exporter-a"} <= passed


def test_high_node_utilization_evicts_what_the_descheduler_would(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # thresholds cpu 20 (nodes of 4 cores: underutilized below 800m requested), numberOfNodes 1;
    # DefaultEvictor: evictLocalStoragePods, labelSelector tier=batch; kube-system excluded
    nodes = ("full-1", "low-1", "low-2")
    for name in nodes:
        api_made.add(api_cluster, b.node(name, cpu="4", memory="16Gi"))
    api_made.add(
        api_cluster, b.deployment("shop", "shop", replicas=4), b.replica_set(RS, "shop", deployment="shop", replicas=4)
    )
    batch = {"tier": "batch"}
    add_pod(api_cluster, "app-0", "full-1", "2400m", labels={"tier": "web"})  # 60%: a destination
    add_pod(api_cluster, "batch-0", "low-1", "200m", labels=batch, volumes=[EMPTY_DIR])  # local storage allowed
    add_pod(api_cluster, "exporter-1", "low-1", "100m", namespace="monitoring")  # DaemonSet: stays
    add_pod(api_cluster, "batch-1", "low-2", "400m", labels=batch)
    # low-1 and low-2 really run hot and full-1 idles: requests decide
    usage = {
        ("shop", "app-0"): ("full-1", 0.1), ("shop", "batch-0"): ("low-1", 3.0),
        ("monitoring", "exporter-1"): ("low-1", 0.1), ("shop", "batch-1"): ("low-2", 3.5),
    }  # fmt: skip

    plan = plan_imported(
        "v1alpha2-high-node-utilization.yaml",
        api_cluster,
        api_kubeconfig,
        history(nodes, usage),
        start_prometheus,
        tmp_path,
    )

    classes = {d.node: d.node_class for d in plan.results[0].node_decisions}
    assert classes == {"full-1": NodeClass.NORMAL, "low-1": NodeClass.COLD, "low-2": NodeClass.COLD}
    # two underutilized nodes, more than numberOfNodes 1: their evictable pods go, onto full-1 (1600m free)
    assert sorted((e.name, e.room_on) for e in plan.evictions) == [("batch-0", "full-1"), ("batch-1", "full-1")]


def test_v1alpha1_policy_evicts_lowest_priority_first_up_to_the_node_cap(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # v1alpha1: thresholds cpu 25, targetThresholds cpu 60 (nodes of 4 cores: hot above 2400m requested),
    # numberOfNodes 1, thresholdPriority 100000, local storage and PVC pods evictable, kube-system and ingress
    # excluded, maxNoOfPodsToEvictPerNode 3 (every strategy together: the evictor's node cap)
    nodes = ("hot-a", "cold-1", "cold-2")
    for name in nodes:
        api_made.add(api_cluster, b.node(name, cpu="4", memory="16Gi"))
    api_made.add(
        api_cluster, b.deployment("shop", "shop", replicas=7), b.replica_set(RS, "shop", deployment="shop", replicas=7)
    )
    # hot-a requests 3600m (90%): 1200m above target
    add_pod(api_cluster, "p-a", "hot-a", "300m", priority=10)
    add_pod(api_cluster, "p-b", "hot-a", "300m", priority=20, volumes=[PVC])
    add_pod(api_cluster, "p-c", "hot-a", "300m", priority=30, volumes=[EMPTY_DIR])
    add_pod(api_cluster, "p-d", "hot-a", "300m", priority=40)
    add_pod(api_cluster, "vip-0", "hot-a", "1200m", priority=200000)  # above thresholdPriority
    add_pod(api_cluster, "nginx-0", "hot-a", "600m", namespace="ingress")
    add_pod(api_cluster, "dns-0", "hot-a", "600m", namespace="kube-system")
    add_pod(api_cluster, "web-1", "cold-1", "200m")
    add_pod(api_cluster, "web-2", "cold-2", "200m")
    on_hot = [("shop", "p-a"), ("shop", "p-b"), ("shop", "p-c"), ("shop", "p-d"), ("shop", "vip-0"),
              ("ingress", "nginx-0"), ("kube-system", "dns-0")]  # fmt: skip
    usage = dict.fromkeys(on_hot, ("hot-a", 0.1))
    usage |= {("shop", "web-1"): ("cold-1", 0.1), ("shop", "web-2"): ("cold-2", 0.1)}
    policy = import_policy("v1alpha1.yaml", history(nodes, usage), start_prometheus, tmp_path)

    result = app.run_once(
        load_policy(policy), app.ClusterConnection(str(api_kubeconfig)), DryRun.OFF, clock=lambda: END
    )

    # the descheduler evicts by priority, lowest first, while the node stays above 2400m: p-a, p-b, p-c
    # (3600m -> 2700m), and would take p-d (2400m) but for maxNoOfPodsToEvictPerNode 3
    done = {r.eviction.name: (r.outcome, r.limiter) for r in result.report.results}
    assert done == {
        "p-a": (Outcome.EVICTED, None),
        "p-b": (Outcome.EVICTED, None),
        "p-c": (Outcome.EVICTED, None),
        "p-d": (Outcome.BLOCKED, "node.maxPerCycle"),
    }
    left = {p["metadata"]["name"] for p in api_cluster.admin.items("v1", "Pod", "shop")}
    assert left == {"p-d", "vip-0", "web-1", "web-2"}
