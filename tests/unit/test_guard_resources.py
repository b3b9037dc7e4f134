"""The landing guard with memory thresholds: a node hot on memory alone is marked like a CPU-hot one, and
under the cap the node most over any target, relative to it, is marked first."""

from __future__ import annotations

from rebalancer.actions.guard.decide import Action, decide, guarded_nodes, pool_sizes
from rebalancer.domain.guard_marks import MarkReason
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.plan import NodeClass
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, policy

GI = 2**30
NOW = 1_790_000_000.0
LNU = (
    "kind: LowNodeUtilization\nthresholds: {cpu: 30, memory: 40}\ntargetThresholds: {cpu: 70, memory: 80}\n"
    "predictPlacement: false\n"
)
# mem: CPU 30%, memory 95% (19% over its target); cpu: CPU 75% (7% over), memory 50%; three cold nodes
USAGE = {
    "mem": (3_000, 9.5),
    "cpu": (7_500, 5.0),
    "cold-1": (1_000, 1.0),
    "cold-2": (1_000, 1.0),
    "cold-3": (1_000, 1.0),
}


def guarded(fraction: float):
    guard = f"landingGuard:\n  pools:\n  - {{pool: p, maxMarkedFraction: {fraction}}}\n"
    nodes = [node(name, 10_000, pool="p", memory=10 * GI) for name in USAGE]
    usage = UsageReport(
        node_cpu_m={n: cpu for n, (cpu, _) in USAGE.items()},
        pod_cpu_m={},
        node_memory={n: int(gib * GI) for n, (_, gib) in USAGE.items()},
        pod_memory={},
    )
    chosen = policy(LNU, guard)
    snapshot, plan = plan_cycle(ClusterFacts(tuple(nodes), ()), usage, chosen, NOW)
    found = guarded_nodes(snapshot, plan, ())
    return found, decide(found, chosen.landing_guard, "rebalancer/test", NOW, pool_sizes(snapshot))


def test_a_memory_hot_node_is_marked_like_a_cpu_hot_one() -> None:
    found, decision = guarded(1.0)
    assert {n.name: n.node_class for n in found} == {"mem": NodeClass.HOT, "cpu": NodeClass.HOT}
    assert {c.node: (c.action, c.reason) for c in decision.changes} == {
        "mem": (Action.SET, MarkReason.HOT.value),
        "cpu": (Action.SET, MarkReason.HOT.value),
    }


def test_under_the_cap_the_node_most_over_a_target_is_marked_first() -> None:
    found, decision = guarded(0.2)  # one node of five
    over = {n.name: round(n.over_target or 0.0, 4) for n in found}
    assert over == {"mem": 0.1875, "cpu": 0.0714}
    assert [c.node for c in decision.changes] == ["mem"]  # not the node with the higher CPU
    assert [(n.node, n.why) for n in decision.notes] == [("cpu", "capped: 1 of 5 node(s) may be marked")]
