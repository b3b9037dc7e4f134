"""Plain builders for domain objects (no mocks): short to call, explicit about what a test varies."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import (
    ClusterFacts,
    DisruptionBudget,
    Node,
    Pod,
    Taint,
    Toleration,
    UsageReport,
    WorkloadRef,
)
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.snapshot import ClusterSnapshot, build_snapshot
from rebalancer.policy import Policy, parse_policy

GI = 2**30
_uids = itertools.count(1)


def node(
    name: str,
    cpu_m: int = 10_000,
    *,
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    unschedulable: bool = False,
    ready: bool = True,
    memory: int = 64 * GI,
    max_pods: int = 110,
) -> Node:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if pool is not None:
        all_labels["pool"] = pool
    return Node(name, all_labels, cpu_m, memory, max_pods, tuple(taints), unschedulable, ready)


def pod(
    name: str,
    node_name: str | None,
    *,
    namespace: str = "default",
    workload: str | None = "web",
    kind: str = "Deployment",
    owner_kind: str | None = None,
    cpu_request_m: int = 100,
    memory_request: int = GI // 4,
    priority: int = 0,
    priority_class: str = "",
    ready: bool = True,
    phase: str = "Running",
    restarts: int = 0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    volumes: Iterable[str] = (),
    tolerations: Iterable[Toleration] = (),
    node_selector: Mapping[str, str] | None = None,
    terminating: bool = False,
    mirror: bool = False,
    **extra: Any,
) -> Pod:
    ref = WorkloadRef(kind, namespace, workload) if workload is not None else None
    if owner_kind is None and ref is not None:
        owner_kind = "ReplicaSet" if kind == "Deployment" else kind
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{next(_uids):08d}",  # zero-padded: their order is the order they were made, whatever came before
        node_name=node_name,
        phase=phase,
        ready=ready,
        workload=ref,
        owner_kind=owner_kind,
        priority=priority,
        priority_class=priority_class,
        qos="Burstable",
        cpu_request_m=cpu_request_m,
        memory_request=memory_request,
        created=1_700_000_000.0,
        restarts=restarts,
        labels=dict(labels or {"app": workload or name}),
        annotations=dict(annotations or {}),
        volume_kinds=frozenset(volumes),
        tolerations=tuple(tolerations),
        node_selector=dict(node_selector or {}),
        terminating=terminating,
        mirror=mirror,
        **extra,
    )


def budget(
    name: str,
    match: Mapping[str, str],
    allowed: int,
    *,
    namespace: str = "default",
    healthy: tuple[int, int] = (0, 0),
) -> DisruptionBudget:
    """``healthy``: the status' (currentHealthy, desiredHealthy)."""
    selector = LabelSelector(tuple(sorted(match.items())))
    return DisruptionBudget(namespace, name, selector, None, 1, allowed, healthy[0], healthy[1], 0)


def usage(
    nodes: Mapping[str, int], pods: Mapping[str, int] | Mapping[tuple[str, str], int] | None = None
) -> UsageReport:
    pod_usage: dict[tuple[str, str], int] = {}
    for key, value in (pods or {}).items():
        pod_usage[key if isinstance(key, tuple) else ("default", key)] = value
    return UsageReport(node_cpu_m=dict(nodes), pod_cpu_m=pod_usage)


def snapshot(
    nodes: Iterable[Node],
    pods: Iterable[Pod],
    report: UsageReport,
    *,
    budgets: Iterable[DisruptionBudget] = (),
    pools: PoolSettings | None = None,
    taken_at: float = 1_700_000_000.0,
) -> ClusterSnapshot:
    facts = ClusterFacts(tuple(nodes), tuple(pods), tuple(budgets))
    return build_snapshot(facts, report, pools or PoolSettings(label="pool"), taken_at)


def policy(strategy_yaml: str, extra_yaml: str = "") -> Policy:
    """A policy with one strategy, e.g. policy('kind: LowNodeUtilization\\nthresholds: {cpu: 20}...')."""
    indented = "\n".join("    " + line for line in strategy_yaml.strip().splitlines())
    text = f"pools:\n  label: pool\n{extra_yaml}\nstrategies:\n  - {indented.strip()}\n"
    return parse_policy(text, "test-policy")
