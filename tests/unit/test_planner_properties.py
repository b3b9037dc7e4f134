"""Safety invariants of the planners over random clusters and policies (hypothesis).

Whatever the cluster looks like: no protected pod is planned, no budget is overdrawn, no destination is
pushed over its target (nor over LowNodeUtilization's receiveThresholds, nor a hot one chosen), nothing moves
from or to a node whose usage is unknown, caps hold.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Node, Pod, Taint, Toleration, UsageReport
from rebalancer.planning.plan import NodeClass, NodeDecision
from rebalancer.planning.protections import Protections
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import budget, node, pod, policy

EXAMPLES = 600

TAINT = Taint("dedicated", "x", "NoSchedule")


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    return draw(st.integers(0, one_in - 1)) == 0


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterFacts, UsageReport]:
    nodes: list[Node] = []
    for i in range(draw(st.integers(1, 10))):
        nodes.append(
            node(
                f"n{i}",
                cpu_m=draw(st.sampled_from([4000, 8000, 16000])),
                pool=draw(st.sampled_from(["a", "a", "b"])),
                taints=[TAINT] if rarely(draw, 4) else [],
                unschedulable=rarely(draw, 10),
                ready=not rarely(draw, 10),
                max_pods=draw(st.integers(2, 30)),
            )
        )
    names = [n.name for n in nodes]
    # half the clusters crowd their first nodes (hot beside cold), half spread pods evenly
    skewed = names + names[:2] * 4 if draw(st.booleans()) else names
    h = draw(st.sampled_from([1, 4]))  # how rare protected pods are: a few clusters need none to drain a node
    pods: list[Pod] = []
    for j in range(draw(st.integers(0, 60))):
        app = draw(st.sampled_from(["web", "db", "cache"]))
        pods.append(
            pod(
                f"p{j}",
                None if rarely(draw, 15) else draw(st.sampled_from(skewed)),  # a few replicas not scheduled yet
                namespace="kube-system" if rarely(draw, 8 * h) else "default",
                workload=None if rarely(draw, 10 * h) else app,
                kind=draw(st.sampled_from(["Deployment"] * (3 * h) + ["StatefulSet", "DaemonSet"])),
                cpu_request_m=draw(st.integers(0, 1500)),
                priority=draw(st.sampled_from([0] * (3 * h) + [100, 2_000_000_000])),
                ready=not rarely(draw, 6),
                phase="Pending" if rarely(draw, 12 * h) else "Running",
                labels={"app": app},
                volumes=draw(st.sampled_from([()] * (3 * h) + [("emptyDir",), ("persistentVolumeClaim",)])),
                tolerations=[Toleration("dedicated", "Exists", "", "")] if draw(st.booleans()) else [],
                annotations={"rebalancer.io/evict": "false"} if rarely(draw, 12 * h) else {},
                terminating=rarely(draw, 20 * h),
                mirror=rarely(draw, 30 * h),
            )
        )
    peak = draw(st.sampled_from([300, 2500]))  # light clusters have idle nodes to empty
    pod_usage = {p.key: draw(st.integers(0, peak)) for p in pods if not rarely(draw, 10 * h)}
    node_usage = {}
    for n in nodes:
        if not rarely(draw, 10):
            on_node = sum(pod_usage.get(p.key, 0) for p in pods if p.node_name == n.name)
            node_usage[n.name] = on_node + draw(st.integers(0, 500))  # plus system usage
    budgets: list[DisruptionBudget] = [
        budget(f"pdb-{app}", {"app": app}, draw(st.integers(0, 2))) for app in ("web", "db") if draw(st.booleans())
    ]
    report = UsageReport.failed("down") if rarely(draw, 20) else UsageReport(node_usage, pod_usage)
    return ClusterFacts(tuple(nodes), tuple(pods), tuple(budgets)), report


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    low = draw(st.integers(5, 50))
    high = draw(st.integers(low, 90))
    kind = draw(st.sampled_from(["LowNodeUtilization", "HighNodeUtilization"]))
    extra = ""
    if kind == "LowNodeUtilization":
        if draw(st.booleans()):
            extra += f"maxNoOfPodsToEvictPerNode: {draw(st.integers(1, 3))}\n"
        if draw(st.booleans()):
            extra += "destinationsInSamePool: false\n"
        if draw(st.integers(0, 3)) == 0:
            extra += "useDeviationThresholds: true\n"
        if draw(st.booleans()):
            extra += "predictPlacement: false\n"
        if draw(st.integers(0, 2)) == 0:
            extra += f"minExpectedGain: {draw(st.sampled_from([0, 10, 20]))}\n"
        if draw(st.booleans()):
            extra += f"receiveThresholds: {{cpu: {draw(st.integers(low, high))}}}\n"
    elif draw(st.booleans()):
        extra += "predictPlacement: false\n"
    yaml = f"kind: {kind}\nthresholds: {{cpu: {low}}}\ntargetThresholds: {{cpu: {high}}}\n{extra}"
    protections = ""
    if draw(st.booleans()):
        protections = "protections:\n  evictLocalStoragePods: true\n  priorityThreshold: 100\n"
    return policy(yaml, protections)


def assert_receivable(strategy: object, d: NodeDecision, n: Node, extra: int) -> None:
    """LowNodeUtilization moves nothing onto a hot node, nor past its receiveThresholds (absolute ones)."""
    if getattr(strategy, "kind", None) != "LowNodeUtilization":
        return
    assert d.node_class is not NodeClass.HOT, "a hot node received load"
    receive = getattr(strategy, "receive_thresholds", None)
    if receive is not None and not getattr(strategy, "use_deviation_thresholds", False):
        assert d.usage_m is not None
        assert d.usage_m + extra <= int(n.allocatable_cpu_m * receive.cpu / 100.0), "pushed over receiveThresholds"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), policies())
def test_plans_are_safe(cluster: tuple[ClusterFacts, UsageReport], pol: Policy) -> None:
    facts, report = cluster
    snapshot, plan = plan_cycle(facts, report, pol, 1_700_000_000.0)
    protections = Protections.from_settings(pol.protections)
    pods = {p.key: p for p in facts.pods}
    result = plan.results[0]
    decisions = {d.node: d for d in result.node_decisions}
    strategy = pol.strategies[0]

    if report.failure:
        assert plan.blocked and plan.evictions == ()
        assert all(d.node_class is NodeClass.UNKNOWN for d in result.node_decisions)
        return

    keys = [e.key for e in plan.evictions]
    assert len(keys) == len(set(keys)), "a pod planned twice"

    received_usage: dict[str, int] = defaultdict(int)
    received_cpu: dict[str, int] = defaultdict(int)
    received_pods: Counter[str] = Counter()
    for eviction in plan.evictions:
        p = pods[eviction.key]
        assert protections.reason(p) is None, f"protected pod {p} planned: {protections.reason(p)}"
        assert eviction.key in report.pod_cpu_m, "pod with unknown usage planned"
        assert p.node_name == eviction.node
        source, dest = decisions[eviction.node], decisions[eviction.room_on]
        assert eviction.room_on != eviction.node
        if eviction.landing is not None:  # predicted: room is counted where the replacement lands
            assert eviction.landing == eviction.room_on
        assert source.node_class is NodeClass.COLD if strategy.kind == "HighNodeUtilization" else NodeClass.HOT
        assert dest.usage_m is not None and dest.node_class is not NodeClass.UNKNOWN
        dest_node = snapshot.nodes[eviction.room_on]
        assert not dest_node.unschedulable and dest_node.ready
        received_usage[eviction.room_on] += eviction.usage_m
        received_cpu[eviction.room_on] += p.cpu_request_m
        received_pods[eviction.room_on] += 1

    for dest, extra in received_usage.items():
        d = decisions[dest]
        n = snapshot.nodes[dest]
        load = snapshot.load[dest]
        assert d.usage_m is not None and d.high_pct is not None
        assert d.usage_m + extra <= int(n.allocatable_cpu_m * d.high_pct / 100.0), "destination pushed over target"
        assert_receivable(strategy, d, n, extra)
        assert load.requested_cpu_m + received_cpu[dest] <= n.allocatable_cpu_m, "requests exceed allocatable"
        assert load.pod_count + received_pods[dest] <= n.allocatable_pods, "pod capacity exceeded"

    for b in facts.budgets:
        taken = sum(1 for e in plan.evictions if b.selects(pods[e.key]) and pods[e.key].ready)
        assert taken <= b.disruptions_allowed, f"budget {b.name} overdrawn"
    for e in plan.evictions:
        assert sum(1 for b in facts.budgets if b.selects(pods[e.key])) <= 1

    per_node = Counter(e.node for e in plan.evictions)
    limit = getattr(strategy, "max_no_of_pods_to_evict_per_node", None)
    if limit is not None:
        assert max(per_node.values(), default=0) <= limit

    if strategy.kind == "HighNodeUtilization":
        for drained in per_node:
            staying = [
                p
                for p in snapshot.pods_on(drained)
                if p.key not in keys and p.owner_kind not in ("DaemonSet", "Node") and not p.mirror
            ]
            assert staying == [], f"{drained} half emptied: {[str(p) for p in staying]}"
