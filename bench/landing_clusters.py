"""The clusters of ``bench.landing_vs_scheduler``: hollow nodes (1 CPU, 3840Mi, 110 pods each) with labels and
taints, and Deployments whose pods the real kube-scheduler places, one kind of constraint per cluster.

Requests are uneven (CPU-heavy and memory-heavy workloads side by side, some requesting nothing) so that
NodeResourcesFit and BalancedAllocation differ between nodes; every kind but ``taints`` has several pools or
zones by node label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.realcluster import objects as o

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Nodes:
    """Hollow nodes started alike: their names, labels and taints at registration (``key=value:Effect``)."""

    names: tuple[str, ...]
    labels: Mapping[str, str]
    taints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    """A Deployment: replicas, requests ("" requests nothing) and the rest of its pod spec."""

    name: str
    replicas: int
    cpu: str
    memory: str
    spec: Mapping[str, Any] = field(default_factory=dict)

    def deployment(self, namespace: str) -> dict[str, Any]:
        obj = o.deployment(self.name, namespace, replicas=self.replicas, cpu=self.cpu, memory=self.memory,
                           pod_spec=self.spec)  # fmt: skip
        spec = obj["spec"]["template"]["spec"]
        del spec["terminationGracePeriodSeconds"]  # the default 30 s: the evicted pod terminates meanwhile
        container = spec["containers"][0]
        requests = {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v}
        container["resources"] = {"requests": requests} if requests else {}
        return obj


@dataclass(frozen=True)
class ClusterKind:
    name: str
    what: str
    nodes: tuple[Nodes, ...]
    workloads: tuple[Workload, ...]
    unmodelled: str = ""  # what of the kind's constraints the scheduler model leaves out ("": none)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n for group in self.nodes for n in group.names)


def _names(prefix: str, count: int, start: int = 1) -> tuple[str, ...]:
    return tuple(f"{prefix}-{i}" for i in range(start, start + count))


def _spread(key: str, skew: int, when: str, app: str) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": app}}}  # fmt: skip


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _node_term(key: str, values: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


REQUESTS = ClusterKind(
    "requests",
    "uneven CPU and memory requests, two pools, no constraint",
    (Nodes(_names("req-a", 3), {"pool": "a"}), Nodes(_names("req-b", 3), {"pool": "b"})),
    (
        Workload("web", 6, "100m", "128Mi"),
        Workload("api", 4, "250m", "512Mi"),
        Workload("batch", 3, "50m", "1Gi"),
        Workload("cache", 2, "300m", "256Mi"),
        Workload("idle", 3, "", ""),  # BestEffort: scored with the scheduler's non-zero defaults
    ),
)

TAINTS = ClusterKind(
    "taints",
    "PreferNoSchedule and NoSchedule taints, tolerations",
    (
        Nodes(_names("spot", 2), {"pool": "spot"}, ("spot=true:PreferNoSchedule",)),
        Nodes(_names("infra", 1), {"pool": "infra"}, ("dedicated=infra:NoSchedule",)),
        Nodes(_names("std", 3), {"pool": "std"}),
    ),
    (
        Workload("web", 6, "100m", "128Mi"),
        Workload(
            "spot-ok",
            4,
            "200m",
            "256Mi",
            {"tolerations": [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}]},
        ),
        Workload(
            "infra",
            3,
            "150m",
            "256Mi",
            {"tolerations": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]},
        ),
        Workload("anywhere", 3, "100m", "1Gi", {"tolerations": [{"operator": "Exists"}]}),
    ),
)

ZONES = ClusterKind(
    "zones",
    "three zones, topologySpreadConstraints (DoNotSchedule and ScheduleAnyway) and the default spreading",
    tuple(Nodes(_names(f"zone{z}", 2), {ZONE: f"zone-{z}", "pool": "general"}) for z in "abc"),
    (
        Workload(
            "spread-hard",
            6,
            "150m",
            "256Mi",
            {
                "topologySpreadConstraints": [
                    _spread(ZONE, 1, "DoNotSchedule", "spread-hard"),
                    _spread(HOST, 1, "ScheduleAnyway", "spread-hard"),
                ]
            },
        ),
        Workload(
            "spread-soft",
            4,
            "200m",
            "128Mi",
            {"topologySpreadConstraints": [_spread(ZONE, 1, "ScheduleAnyway", "spread-soft")]},
        ),
        Workload("plain", 5, "100m", "512Mi"),
    ),
    "pods' own topologySpreadConstraints",
)

AFFINITY = ClusterKind(
    "affinity",
    "two pools in two zones, required and preferred node affinity, pod affinity and anti-affinity",
    (
        Nodes(_names("gen-a", 2), {"pool": "general", ZONE: "zone-a"}),
        Nodes(_names("gen-b", 2), {"pool": "general", ZONE: "zone-b"}),
        Nodes(_names("mem", 2), {"pool": "memory", ZONE: "zone-b"}),
    ),
    (
        Workload(
            "front",
            4,
            "100m",
            "128Mi",
            {
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("front", HOST)]}
                }
            },
        ),
        Workload(
            "mem",
            3,
            "100m",
            "1Gi",
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [_node_term("pool", ["memory"])]
                        }
                    }
                }
            },
        ),
        Workload(
            "prefer-mem",
            4,
            "150m",
            "256Mi",
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 80, "preference": _node_term("pool", ["memory"])}
                        ]
                    }
                }
            },
        ),
        Workload(
            "near-front",
            3,
            "100m",
            "128Mi",
            {
                "affinity": {
                    "podAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 100, "podAffinityTerm": _term("front", ZONE)}
                        ]
                    }
                }
            },
        ),
        Workload(
            "away-mem",
            3,
            "100m",
            "128Mi",
            {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 100, "podAffinityTerm": _term("mem", HOST)}
                        ]
                    }
                }
            },
        ),
    ),
)

KINDS = {kind.name: kind for kind in (REQUESTS, TAINTS, ZONES, AFFINITY)}
