"""One small real cluster for the end-to-end tests: three hollow nodes (1 CPU each), Deployments placed by the
real scheduler, and cAdvisor-shaped history of those very pods in a real Prometheus, ending now.

hot-1 runs the three ``api`` pods at 0.3 cores each (95 % with its system daemons and pause containers); cold-1
and cold-2 run one ``web`` pod each at 0.05 cores (about 10 %). Every pod requests 200m, so the scheduler
places a replacement by requests: away from hot-1 (600m requested) onto a cold node (200m).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o

NODES = ("hot-1", "cold-1", "cold-2")
NAMESPACE = "shop"
SYSTEM_CORES = 0.05
CORES = {"api": 0.3, "web": 0.05}
REPLICAS = {"api": 3, "web": 2}
PROBE_NAMESPACE = "default"  # where cordon's scheduler probes run (each deleted at once)
SCHEDULER_SEES_WITHIN = 30.0  # seconds: kube-scheduler's node watch lags the API by milliseconds when idle


@dataclass(frozen=True)
class Placed:
    """The pods as the real scheduler placed them: name -> (workload, node)."""

    pods: dict[str, tuple[str, str]]
    end: float

    def on(self, node: str) -> set[str]:
        return {name for name, (_, where) in self.pods.items() if where == node}

    def history(self, hours: float = 1.0) -> CadvisorHistory:
        specs = tuple(
            PodSpec(NAMESPACE, name, node, (Container("app", constant(CORES[workload])),))
            for name, (workload, node) in sorted(self.pods.items())
        )
        return CadvisorHistory(
            nodes=tuple(NodeSpec(n, SYSTEM_CORES) for n in NODES),
            pods=specs,
            start=self.end - hours * 3600,
            end=self.end,
        )


def running(plane: ControlPlane, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
    """The namespace's pods that run (Running and bound), by name."""
    return {
        p["metadata"]["name"]: p
        for p in plane.admin.items("v1", "Pod", namespace)
        if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
    }


def wait_running(plane: ControlPlane, count: int, namespace: str = NAMESPACE) -> dict[str, dict[str, Any]]:
    return plane.admin.wait_for(
        f"{count} running pods in {namespace}",
        lambda: pods if len(pods := running(plane, namespace)) == count else None,
        timeout=90,
    )


def cordon(plane: ControlPlane, node: str, unschedulable: bool) -> None:
    """Cordon (or uncordon) ``node``, and return once kube-scheduler acts on it: the scheduler reads nodes
    from its own watch, so a pod created right after the patch could still be placed as before it."""
    path = f"/api/v1/nodes/{node}"
    if bool(plane.admin.get(path)["spec"].get("unschedulable")) == unschedulable:
        return  # as wanted already, and seen so by the scheduler when this function made it so
    plane.admin.patch(path, {"spec": {"unschedulable": unschedulable or None}})
    deadline = time.monotonic() + SCHEDULER_SEES_WITHIN
    while _probe_bound(plane, node) == unschedulable:
        state = "cordoned" if unschedulable else "uncordoned"
        assert time.monotonic() < deadline, (
            f"kube-scheduler did not see {node} {state} within {SCHEDULER_SEES_WITHIN:g} s"
        )


def _probe_bound(plane: ControlPlane, node: str) -> bool:
    """Whether kube-scheduler binds a pod pinned to ``node`` (no requests, no tolerations) now, or reports it
    unschedulable; the pod is deleted either way."""
    name = f"scheduler-probe-{uuid.uuid4().hex[:8]}"
    probe = o.pod(name, PROBE_NAMESPACE)
    probe["spec"]["containers"][0].pop("resources")
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    probe["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    path = f"/api/v1/namespaces/{PROBE_NAMESPACE}/pods/{name}"
    plane.admin.create(probe)
    try:

        def placed() -> str | None:
            pod = plane.admin.get(path)
            if pod["spec"].get("nodeName"):
                return "bound"
            conditions = pod["status"].get("conditions", ())
            failed = any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)
            return "unschedulable" if failed else None

        return plane.admin.wait_for(f"kube-scheduler to place {name}", placed, timeout=30, every=0.05) == "bound"
    finally:
        plane.admin.delete(path, gracePeriodSeconds=0)


def build(plane: ControlPlane) -> Placed:
    """The hollow nodes and the Deployments, ``api`` on hot-1 (the others cordoned meanwhile), ``web`` on the
    cold nodes; returns where each pod runs, with ``end`` = now for the history."""
    plane.hollow_nodes(NODES)
    plane.namespace(NAMESPACE)
    for node in NODES[1:]:
        cordon(plane, node, True)
    plane.admin.create(o.deployment("api", NAMESPACE, replicas=REPLICAS["api"], cpu="200m"))
    wait_running(plane, REPLICAS["api"])
    for node in NODES[1:]:
        cordon(plane, node, False)
    plane.admin.create(o.deployment("web", NAMESPACE, replicas=REPLICAS["web"], cpu="200m"))
    pods = wait_running(plane, REPLICAS["api"] + REPLICAS["web"])
    placed = {name: (p["metadata"]["labels"]["app"], p["spec"]["nodeName"]) for name, p in pods.items()}
    assert {n for w, n in placed.values() if w == "api"} == {"hot-1"}, placed
    assert {n for w, n in placed.values() if w == "web"} == {"cold-1", "cold-2"}, placed
    return Placed(placed, end=float(int(time.time())))


def write_policy(path: Path, prometheus_url: str, *, target: int = 70, extra: str = "") -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        f"strategies:\n- {{kind: LowNodeUtilization, thresholds: {{cpu: 20}}, targetThresholds: {{cpu: {target}}}}}\n"
        "state: {namespace: rebalancer}\n" + extra
    )
    return path
