"""Hot nodes relieved with the second half ahead in a forked child give exactly the plan relieved in turn.

The offload is the real one (``rebalancer.offload.ForkOffload``: a forked copy of this process); its
reports say which way each plan went: the answer taken (nothing moved in the first half), the child
cancelled at the first move, or no answer (this process relieved the second half itself).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.cycle import plan_cycle
from rebalancer.model import ClusterFacts, Node, Pod, Taint, Toleration, UsageReport
from rebalancer.offload import ForkOffload
from rebalancer.plan import EvictionPlan, NodeDecision
from rebalancer.policy import Policy
from strategies.low_node_utilization import LowNodeUtilization
from strategies.placement import REMEMBERED
from tests.builders import budget, node, pod, policy, usage
from tests.unit.test_planner_properties import clusters, policies

T = TypeVar("T")
AT = 1_700_000_000.0
TAINT = Taint("dedicated", "x", "NoSchedule")
LNU = "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 50}\n"


def planned(facts: ClusterFacts, report: UsageReport, pol: Policy, offload: ForkOffload | None) -> EvictionPlan:
    return plan_cycle(facts, report, pol, AT, offload=offload)[1]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), policies())
def test_a_split_plan_is_the_plan_in_turn(cluster: tuple[ClusterFacts, UsageReport], pol: Policy) -> None:
    facts, report = cluster
    offload = ForkOffload(min_split=2, timeout_s=30)  # no probe: every plan with two hot nodes forks
    assert planned(facts, report, pol, offload) == planned(facts, report, pol, None)
    assert all(r.outcome in ("answered", "cancelled") for r in offload.reports)


@st.composite
def hot_pools(draw: st.DrawFn) -> tuple[ClusterFacts, UsageReport, Policy]:
    """Many hot nodes and little room: most candidates are refused (no room, a spent budget, a predicted
    landing elsewhere), so that the first half often moves nothing and the child's answer is taken."""
    nodes = [node(f"cold-{i}", draw(st.sampled_from([2000, 4000])), pool="a") for i in range(draw(st.integers(1, 3)))]
    node_m = {n.name: draw(st.integers(0, n.allocatable_cpu_m // 5 - 1)) for n in nodes}
    pods: list[Pod] = []
    pod_m: dict[str, int] = {}
    for i in range(draw(st.integers(2, 12))):
        name = f"hot-{i:02d}"
        nodes.append(node(name, 4000, pool="a", taints=[TAINT] if draw(st.integers(0, 5)) == 0 else []))
        node_m[name] = draw(st.integers(2100, 4000))
        for j in range(draw(st.integers(0, 4))):
            app = draw(st.sampled_from(["web", "db", "cache"]))
            pods.append(
                pod(
                    f"{app}-{i}-{j}",
                    name,
                    workload=app,
                    labels={"app": app},
                    cpu_request_m=draw(st.sampled_from([100, 500, 1500])),
                    tolerations=[Toleration("dedicated", "Exists", "", "")] if draw(st.booleans()) else [],
                )
            )
            pod_m[pods[-1].name] = draw(st.integers(1, 2000))
    budgets = tuple(
        budget(f"pdb-{app}", {"app": app}, draw(st.integers(0, 1))) for app in ("web", "db") if draw(st.booleans())
    )
    extra = "" if draw(st.booleans()) else "predictPlacement: false\n"
    if draw(st.booleans()):
        extra += f"maxNoOfPodsToEvictPerNode: {draw(st.integers(1, 2))}\n"
    return ClusterFacts(tuple(nodes), tuple(pods), budgets), usage(node_m, pod_m), policy(LNU + extra)


def test_a_split_plan_of_many_hot_nodes_is_the_plan_in_turn() -> None:
    ways: Counter[tuple[str, ...]] = Counter()

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(hot_pools(), st.sampled_from([2, 4, 8]))
    def split_equals_in_turn(cluster: tuple[ClusterFacts, UsageReport, Policy], min_split: int) -> None:
        facts, report, pol = cluster
        offload = ForkOffload(min_split=min_split, timeout_s=30)
        assert planned(facts, report, pol, offload) == planned(facts, report, pol, None)
        ways[tuple(r.outcome for r in offload.reports)] += 1

    split_equals_in_turn()
    # both ways were taken: answers adopted (with remembered searches fixed up) and children cancelled
    assert ways[("answered",)] >= 10 and ways[("cancelled",)] >= 10, ways


def crowded(hot: int, *, room_m: int, pod_usage: tuple[int, ...]) -> tuple[ClusterFacts, UsageReport]:
    """``hot`` nodes at 97% (each holding pods of the given usages, one workload, the same requests)
    and one cold node (under 20%) with ``room_m`` of real-usage room under the 50% target."""
    cold_m = 2000 if room_m <= 1000 else 8000
    nodes: list[Node] = [node("cold", cold_m, pool="a")]
    pods: list[Pod] = []
    pod_m: dict[str, int] = {}
    node_m = {"cold": cold_m // 2 - room_m}
    for i in range(hot):
        nodes.append(node(f"hot-{i:02d}", 4000, pool="a"))
        node_m[f"hot-{i:02d}"] = 3900 - i  # hottest first: the plan's order is the name order
        for j, used in enumerate(pod_usage):
            name = f"web-{i:02d}-{j}"
            pods.append(pod(name, f"hot-{i:02d}"))
            pod_m[name] = used
    return ClusterFacts(tuple(nodes), tuple(pods), ()), usage(node_m, pod_m)


def test_nothing_moving_the_child_answers_and_remembered_searches_read_as_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # no pod fits the cold node: every search fails; in turn, only the first node's searches run in full
    facts, report = crowded(8, room_m=1000, pod_usage=(1800, 1700))
    pol = policy(LNU)
    offload = ForkOffload(min_split=2, timeout_s=30)  # no node probed: 4 here and 4 ahead
    relieved_here: list[str] = []  # the child's calls happen in its own memory
    relieve = LowNodeUtilization._relieve

    def counted(self: LowNodeUtilization, decision: NodeDecision, *args: Any) -> Any:
        relieved_here.append(decision.node)
        return relieve(self, decision, *args)

    monkeypatch.setattr(LowNodeUtilization, "_relieve", counted)
    split = planned(facts, report, pol, offload)
    assert relieved_here == ["hot-00", "hot-01", "hot-02", "hot-03"]  # the rest is the child's answer
    in_turn = planned(facts, report, pol, None)
    assert [r.outcome for r in offload.reports] == ["answered"]
    assert split == in_turn
    reasons = [d.reason for d in split.results[0].pod_decisions]
    assert reasons.count(REMEMBERED) == len(reasons) - 2  # the child's first node was searched in full there


def test_a_move_on_the_probed_nodes_forks_nothing() -> None:
    facts, report = crowded(8, room_m=3000, pod_usage=(900, 800))
    pol = policy(LNU + "predictPlacement: false\n")
    offload = ForkOffload(min_split=4, timeout_s=30)
    split, in_turn = planned(facts, report, pol, offload), planned(facts, report, pol, None)
    assert split.evictions[0].node == "hot-00"
    assert offload.reports == []
    assert split == in_turn


def test_a_move_after_the_probe_cancels_the_child() -> None:
    facts, report = crowded(8, room_m=1000, pod_usage=(1800, 1700))
    # the third node's pods are small enough for the cold node
    pod_m = {k[1]: (500 if k[1].startswith("web-02") else v) for k, v in report.pod_cpu_m.items()}
    report = usage(report.node_cpu_m, pod_m)
    pol = policy(LNU + "predictPlacement: false\n")
    offload = ForkOffload(min_split=4, timeout_s=30)
    split, in_turn = planned(facts, report, pol, offload), planned(facts, report, pol, None)
    assert {e.node for e in split.evictions} == {"hot-02"}
    assert [r.outcome for r in offload.reports] == ["cancelled"]
    assert split == in_turn


class NoAnswer:
    """An offload whose work never answers (a child that died): the plan relieves the part itself."""

    min_split = 2

    def __init__(self) -> None:
        self.started = 0

    def start(self, work: Callable[[], T]) -> NoAnswer:
        self.started += 1
        return self

    def result(self) -> None:
        return None

    def cancel(self) -> None:
        pass


def test_without_an_answer_the_plan_relieves_the_second_half_itself() -> None:
    facts, report = crowded(6, room_m=1000, pod_usage=(1800, 1700))
    pol = policy(LNU)
    offload = NoAnswer()
    split = plan_cycle(facts, report, pol, AT, offload=offload)[1]
    assert offload.started == 1
    assert split == planned(facts, report, pol, None)
    assert len(split.results[0].pod_decisions) == 12
