"""InterPodAffinity in the default-scheduler model, on hand-built clusters whose answer is known."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.labels import LabelSelector, PodAffinity, PodAffinityTerm, WeightedPodAffinityTerm
from rebalancer.domain.model import Node, Pod, Taint
from rebalancer.planning.plan import NodeClass
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.scheduler_sampling import EPSILON
from strategies.landing import LandingPredictor
from tests.builders import node, pod, snapshot, usage
from tests.unit.test_scheduler_model import filler, model, random_cluster

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def term(app: str, key: str = HOST, *, namespaces: frozenset[str] | None = frozenset({"default"})) -> PodAffinityTerm:
    return PodAffinityTerm(key, LabelSelector(match_labels=(("app", app),)), namespaces)


def zoned(name: str, zone: str) -> Node:
    return node(name, labels={ZONE: zone})


def away(*terms: PodAffinityTerm) -> PodAffinity:
    return PodAffinity(required_anti=terms)


ONE_PER_NODE = away(term("front"))


def front(name: str, node_name: str | None, **extra: object) -> Pod:
    return pod(name, node_name, workload="front", pod_affinity=ONE_PER_NODE, **extra)


@dataclass(frozen=True)
class Case:
    id: str
    nodes: list[Node]
    pods: list[Pod]
    new: Pod
    expected: str | None
    vacate: bool = False
    reason_has: str = ""
    feasible: frozenset[str] | None = None  # the feasible nodes, when the case says


_evicted = front("front-1", "a")
_near_db = PodAffinity(required=(term("db", ZONE),))
CASES = [
    Case(
        "required anti-affinity against its own workload: the predecessor still terminates on its node, "
        "so the replacement cannot land back, nor where a sibling runs",
        [node("a"), node("b"), node("c")],
        [_evicted, front("front-2", "b"), *filler("c", 4)],
        _evicted,
        "c",
        vacate=True,
        feasible=frozenset({"c"}),
    ),
    Case(
        "every node holds one: the replacement stays Pending, and the reason names the rule",
        [node("a"), node("b")],
        [_evicted, front("front-2", "b")],
        _evicted,
        None,
        vacate=True,
        reason_has="2 node(s) didn't match pod anti-affinity rules",
    ),
    Case(
        "anti-affinity by zone keeps the pod out of the whole zone of a matching pod",
        [zoned("a", "z1"), zoned("b", "z1"), zoned("c", "z2")],
        [pod("db-1", "b", workload="db"), *filler("c", 4)],
        pod("new", None, workload="new", pod_affinity=away(term("db", ZONE))),
        "c",
        feasible=frozenset({"c"}),
    ),
    Case(
        "an existing pod's anti-affinity keeps the incoming pod it matches off its node (symmetry)",
        [node("a"), node("b")],
        [pod("loner", "a", workload="loner", cpu_request_m=0, pod_affinity=away(term("web"))), *filler("b", 4)],
        pod("web-1", None, workload="web"),
        "b",
        reason_has="",
        feasible=frozenset({"b"}),
    ),
    Case(
        "a term applies in its namespaces only: a matching pod of another namespace does not count",
        [node("a"), node("b")],
        [pod("db-1", "a", workload="db", namespace="other"), *filler("b", 4)],
        pod("new", None, workload="new", pod_affinity=away(term("db"))),
        "a",
        feasible=frozenset({"a", "b"}),
    ),
    Case(
        "every namespace (an empty namespaceSelector): the pod of another namespace counts",
        [node("a"), node("b")],
        [pod("db-1", "a", workload="db", namespace="other"), *filler("b", 4)],
        pod("new", None, workload="new", pod_affinity=away(term("db", namespaces=None))),
        "b",
        feasible=frozenset({"b"}),
    ),
    Case(
        "required affinity: only the zone of a matching pod",
        [zoned("a", "z1"), zoned("b", "z2"), zoned("c", "z2"), node("d")],
        [pod("db-1", "c", workload="db"), *filler("b", 2), *filler("c", 4)],
        pod("new", None, workload="new", pod_affinity=_near_db),
        "b",
        feasible=frozenset({"b", "c"}),
    ),
    Case(
        "required affinity with no matching pod anywhere: unschedulable",
        [zoned("a", "z1"), zoned("b", "z2")],
        [*filler("a", 1)],
        pod("new", None, workload="new", pod_affinity=_near_db),
        None,
        reason_has="2 node(s) didn't match pod affinity rules",
    ),
    Case(
        "the first of a group with affinity to itself: every node with the topology label",
        [zoned("a", "z1"), zoned("b", "z2"), node("c")],
        [*filler("a", 2)],
        pod("db-1", None, workload="db", pod_affinity=_near_db),
        "b",
        feasible=frozenset({"a", "b"}),
    ),
    Case(
        "preferred affinity to a zone outweighs a lighter node elsewhere",
        [zoned("a", "z1"), zoned("b", "z2")],
        [pod("db-1", "a", workload="db", cpu_request_m=1000)],
        pod(
            "new",
            None,
            workload="new",
            pod_affinity=PodAffinity(preferred=(WeightedPodAffinityTerm(50, term("db", ZONE)),)),
        ),
        "a",
    ),
    Case(
        "an existing pod's preferred anti-affinity against the incoming pod pushes it away",
        [node("a"), node("b")],
        [
            pod(
                "shy",
                "a",
                workload="shy",
                cpu_request_m=0,
                pod_affinity=PodAffinity(preferred_anti=(WeightedPodAffinityTerm(100, term("web")),)),
            ),
            *filler("b", 1, cpu_m=500),
        ],
        pod("web-1", None, workload="web"),
        "b",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_inter_pod_affinity(case: Case) -> None:
    m = model(case.nodes, case.pods)

    placed = m.place(case.new, vacate=case.vacate)
    distribution = m.landing_distribution(case.new, vacate=case.vacate)

    assert placed.node == case.expected, placed
    assert case.reason_has in placed.reason
    assert (max(distribution.as_dict(), key=distribution.as_dict().__getitem__, default=None)) == case.expected
    if case.feasible is not None:
        assert set(m.scores(case.new, vacate=case.vacate)) == case.feasible
    ungrouped = snapshot(case.nodes, case.pods, usage({n.name: 0 for n in case.nodes}))
    ungrouped = replace(ungrouped, groups=None, by_workload=None)  # every pod read, not only the counted groups'
    assert SchedulerModel(ungrouped).place(case.new, vacate=case.vacate) == placed


def test_the_preferred_score_is_min_max_normalized_and_weighted_two() -> None:
    nodes = [zoned("a", "z1"), zoned("b", "z2"), zoned("c", "z3")]
    db = [pod("db-1", "a", workload="db"), pod("db-2", "a", workload="db"), pod("db-3", "b", workload="db")]
    keen = pod(
        "new",
        None,
        workload="new",
        pod_affinity=PodAffinity(preferred=(WeightedPodAffinityTerm(10, term("db", ZONE)),)),
    )
    plain = pod("new", None, workload="new")
    m = model(nodes, db)

    with_terms, without = m.scores(keen), m.scores(plain)

    # raw 20 (two db pods in z1), 10, 0: normalized 100, 50, 0, times the plugin weight 2
    assert {n: with_terms[n] - without[n] for n in without} == {"a": 200, "b": 100, "c": 0}
    assert m.max_score(keen) == m.max_score(plain) + 200


def test_pods_alike_but_for_their_affinity_or_labels_do_not_share_a_cached_answer() -> None:
    loner = pod("loner", "a", workload="loner", cpu_request_m=0, pod_affinity=away(term("web")))
    m = model([node("a"), node("b")], [loner, *filler("b", 4)])
    plain = pod("x", None, workload="x")
    webby = pod("x", None, workload="x", labels={"app": "web"})  # the loner's term matches it
    shy = pod("x", None, workload="x", pod_affinity=away(term("loner")))

    assert (m.place(plain).node, m.landing_groups(plain).feasible) == ("a", 2)
    assert (m.place(webby).node, m.landing_groups(webby).feasible) == ("b", 1)
    assert (m.place(shy).node, m.landing_groups(shy).feasible) == ("b", 1)
    assert (m.place(plain).node, m.landing_groups(plain).feasible) == ("a", 2)


def test_moves_keep_the_pods_current_for_the_filter() -> None:
    nodes = [node("a"), node("b"), node("c")]
    first, second = front("front-1", "a"), front("front-2", None)
    m = model(nodes, [first, *filler("b", 1), *filler("c", 2)])

    assert m.place(first, vacate=True).node == "b"
    m.terminate(first)
    m.add(first, "b")  # its replacement bound to b; the evicted pod still terminating on a
    assert m.place(second).node == "c"
    m.remove(first)  # the replacement gone from b
    assert m.place(second).node == "b"
    m.remove(first)  # the terminating pod gone from a too: unknown pods are ignored
    m.restore(first, "a")
    assert set(m.scores(second)) == {"b", "c"}


def test_a_namespace_selector_makes_the_answer_approximate() -> None:
    team = LabelSelector(match_labels=(("team", "x"),))
    unsure = PodAffinityTerm(HOST, LabelSelector(match_labels=(("app", "db"),)), frozenset(), team)
    nodes = [node("a"), node("b")]
    pods = [pod("db-1", "a", workload="db", namespace="other"), pod("web-1", "b", workload="web", cpu_request_m=1000)]
    snap = snapshot(nodes, pods, usage({"a": 0, "b": 0}))
    m = SchedulerModel(snap)
    new = pod("new", None, workload="new", pod_affinity=away(unsure))

    assert "namespaceSelector" in m.landing_distribution(new).caveat
    assert m.landing_distribution(pods[1]).caveat == ""
    predictor = LandingPredictor(snap, {"a": NodeClass.COLD, "b": NodeClass.HOT}, {"a": 10_000}, same_pool=False)
    moved = pod("web-1", "b", workload="web", cpu_request_m=1000, pod_affinity=away(unsure))
    landing = predictor.land(moved, "b", 100)
    assert "namespaceSelector" in landing.caveat and "approximate" in landing.reason
    assert predictor.land(pods[1], "b", 100).caveat == ""


def test_the_predictor_does_not_share_an_answer_between_pods_of_one_workload_with_other_affinity() -> None:
    nodes = [node("a"), node("b"), node("c")]
    plain = pod("web-1", "b", workload="web")
    shy = pod("web-2", "b", workload="web", pod_affinity=away(term("db")))
    pods = [plain, shy, pod("db-1", "a", workload="db"), *filler("c", 2)]
    snap = snapshot(nodes, pods, usage({n.name: 0 for n in nodes}))
    classes = {"a": NodeClass.COLD, "b": NodeClass.HOT, "c": NodeClass.COLD}
    predictor = LandingPredictor(snap, classes, {"a": 10_000, "c": 10_000}, same_pool=False, max_risk=1.0)

    assert predictor.land(plain, "b", 100).node == "a"
    assert predictor.land(shy, "b", 100).node == "c"


def random_terms(rnd: random.Random, zone: bool) -> PodAffinity | None:
    """Required or preferred, affinity or anti-affinity, by host or zone, to one of four apps, or nothing."""
    kind = rnd.randrange(6)
    if kind >= 4:
        return None
    made = term(f"w{rnd.randrange(4)}", ZONE if zone and rnd.random() < 0.3 else HOST)
    weighted = (WeightedPodAffinityTerm(rnd.choice((1, 50, 100)), made),)
    return (
        PodAffinity(required_anti=(made,)),
        PodAffinity(required=(made,)),
        PodAffinity(preferred=weighted),
        PodAffinity(preferred_anti=weighted),
    )[kind]


@settings(max_examples=40, deadline=None)
@given(
    node_count=st.integers(100, 160),
    zone_count=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
    percentage=st.sampled_from([None, 30, 100]),
    moves=st.integers(0, 30),
)
def test_the_ranked_distribution_with_inter_pod_terms_is_the_full_one(
    node_count: int, zone_count: int, seed: int, percentage: int | None, moves: int
) -> None:
    """With pods carrying inter-pod terms (filters and scores that moves change beyond the moved pod's
    node), the distribution built from the class's ranking, the nodes the terms touch scored exactly,
    gives every node the probability the full computation gives it, and leaves out at most EPSILON."""
    rnd = random.Random(seed)
    zones = [f"z{z}" for z in range(zone_count)]
    nodes, plain = random_cluster(
        rnd, node_count, cpu_m=(8_000, 16_000), zones=zones, pools=(None,), tainted=0.1, workloads=25,
        requests=(100, 500),
    )  # fmt: skip
    pods = [
        msgspec.structs.replace(p, labels={"app": f"w{rnd.randrange(8)}"}, pod_affinity=random_terms(rnd, bool(zones)))
        for p in plain
    ]
    m = SchedulerModel(
        snapshot(nodes, pods, usage({n.name: 0 for n in nodes})), percentage_of_nodes_to_score=percentage
    )
    for step in range(moves + 1):
        probe = rnd.choice(pods)
        vacate = rnd.random() < 0.8
        fast = m.landing_distribution(probe, vacate=vacate)
        full = m.full_distribution(probe, vacate=vacate)
        assert (fast.feasible, fast.sampled) == (full.feasible, full.sampled), step
        by_node = dict(
            zip(full.index.tolist(), zip(full.probabilities.tolist(), full.scores.tolist(), strict=True), strict=True)
        )
        named = fast.index.tolist()
        for i, p, score in zip(named, fast.probabilities.tolist(), fast.scores.tolist(), strict=True):
            assert by_node[i] == (pytest.approx(p, rel=1e-12, abs=1e-300), score), (step, i)
        assert sum(p for i, (p, _) in by_node.items() if i not in set(named)) <= EPSILON
        moved = rnd.choice(pods)
        m.remove(moved)
        m.add(moved, rnd.choice(nodes).name)


def test_a_node_the_filter_keeps_out_no_longer_sets_the_taint_normalization() -> None:
    """TaintToleration normalizes by the most untolerated taints on a feasible node: with the only node
    carrying three kept out by anti-affinity, the one-taint node scores 0 for taints, not 67."""
    taints = [Taint(f"t{k}", "x", "PreferNoSchedule") for k in range(3)]
    nodes = [node("a", taints=taints), node("b", taints=taints[:1])]
    m = model(nodes, [pod("db-1", "a", workload="db")])
    new = pod("new", None, workload="new", pod_affinity=away(term("db")))

    ranked, full = m.landing_distribution(new), m.full_distribution(new)

    assert ranked.index.tolist() == full.index.tolist() == [1]
    assert ranked.scores.tolist() == full.scores.tolist()
    assert full.scores.tolist() == [m.scores(pod("new", None, workload="new"))["b"] - 3 * 67]
