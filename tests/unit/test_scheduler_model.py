"""The default-scheduler model on hand-built clusters whose answer is known."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.labels import NodeSelectorTerm, PreferredTerm, Requirement
from rebalancer.domain.model import ClusterFacts, Node, Pod, Taint, Toleration, WorkloadRef
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.scheduler_model import SchedulerModel, max_score
from rebalancer.planning.scheduler_sampling import EPSILON, feasible_nodes_to_find, winning_probabilities
from rebalancer.planning.snapshot import build_snapshot, group_pods
from tests.builders import GI, node, pod, snapshot, usage


def model(nodes: Sequence[Node], pods: Sequence[Pod]) -> SchedulerModel:
    return SchedulerModel(snapshot(nodes, pods, usage({n.name: 0 for n in nodes})))


def filler(node_name: str, count: int, cpu_m: int = 1000, prefix: str = "") -> list[Pod]:
    """``count`` pods of their own workloads (no spreading effect on other workloads)."""
    return [
        pod(f"{prefix}{node_name}-f{i}", node_name, workload=f"{prefix}{node_name}-f{i}", cpu_request_m=cpu_m)
        for i in range(count)
    ]


PREFER = Taint("dedicated", "batch", "PreferNoSchedule")
HARD = Taint("dedicated", "gpu", "NoSchedule")


@dataclass(frozen=True)
class Case:
    id: str
    nodes: list[Node]
    pods: list[Pod]
    new: Pod
    expected: str | None
    vacate: bool = False
    exclude: tuple[str, ...] = ()
    reason_has: str = ""


_moved = pod("web-1", "a", workload="web", cpu_request_m=1000)
CASES = [
    Case(
        "the relieved node is the least requested: the replacement lands back",
        [node("a"), node("b"), node("c")],
        [_moved, *filler("a", 1), *filler("b", 3), *filler("c", 3)],
        _moved,
        "a",
        vacate=True,
    ),
    Case(
        "the evicted pod's requests stay on its node while it terminates: the node as requested without it wins",
        [node("a"), node("b")],
        [_moved, *filler("a", 1), *filler("b", 1)],
        _moved,
        "b",
        vacate=True,
    ),
    Case(
        "without vacating, the least requested node wins",
        [node("a"), node("b"), node("c")],
        [*filler("a", 3), *filler("b", 2), *filler("c", 3)],
        pod("new", None, workload="new", cpu_request_m=500),
        "b",
    ),
    Case(
        "all equal: first by name",
        [node("c"), node("b"), node("a")],
        [],
        pod("new", None, cpu_request_m=500),
        "a",
    ),
    Case(
        "NoSchedule taint not tolerated filters the emptiest node",
        [node("a", taints=[HARD]), node("b"), node("c")],
        [*filler("b", 2), *filler("c", 3)],
        pod("new", None, workload="new"),
        "b",
    ),
    Case(
        "NoSchedule taint tolerated: the emptiest node wins again",
        [node("a", taints=[HARD]), node("b"), node("c")],
        [*filler("b", 2), *filler("c", 3)],
        pod("new", None, workload="new", tolerations=[Toleration("dedicated", "Equal", "gpu", "NoSchedule")]),
        "a",
    ),
    Case(
        "nodeSelector filters",
        [node("a"), node("b", labels={"disk": "ssd"}), node("c", labels={"disk": "ssd"})],
        [*filler("b", 3), *filler("c", 2)],
        pod("new", None, workload="new", node_selector={"disk": "ssd"}),
        "c",
    ),
    Case(
        "cordoned and NotReady nodes filtered",
        [node("a", unschedulable=True), node("b", ready=False), node("c")],
        filler("c", 5),
        pod("new", None, workload="new"),
        "c",
    ),
    Case(
        "PreferNoSchedule moves the choice off the emptiest node",
        [node("a", taints=[PREFER]), node("b"), node("c")],
        [*filler("a", 1), *filler("b", 3), *filler("c", 4)],
        pod("new", None, workload="new"),
        "b",
    ),
    Case(
        "PreferNoSchedule tolerated: no effect",
        [node("a", taints=[PREFER]), node("b"), node("c")],
        [*filler("a", 1), *filler("b", 3), *filler("c", 4)],
        pod("new", None, workload="new", tolerations=[Toleration("dedicated", "Exists", "", "")]),
        "a",
    ),
    Case(
        "PreferNoSchedule on the relieved node keeps the replacement away (the landing guard)",
        [node("a", taints=[PREFER]), node("b"), node("c")],
        [_moved, *filler("a", 2), *filler("b", 3), *filler("c", 3)],
        _moved,
        "b",
        vacate=True,
    ),
    Case(
        "spreading: equal requests, the node without the workload's pods wins",
        [node("a"), node("b")],
        [
            pod("web-1", "a", workload="web", cpu_request_m=1000),
            pod("web-2", "a", workload="web", cpu_request_m=1000),
            *filler("b", 2),
        ],
        pod("web-3", None, workload="web", cpu_request_m=1000),
        "b",
    ),
    Case(
        "spreading in zones: the zone without the workload's pods wins",
        [
            node("a", labels={"topology.kubernetes.io/zone": "z1"}),
            node("b", labels={"topology.kubernetes.io/zone": "z1"}),
            node("c", labels={"topology.kubernetes.io/zone": "z2"}),
        ],
        [
            *[pod(f"web-{i}", "a", workload="web", cpu_request_m=10) for i in range(4)],
            *filler("b", 1, cpu_m=40),
            *filler("c", 1, cpu_m=40),
        ],
        pod("web-9", None, workload="web", cpu_request_m=10),
        "c",
    ),
    Case(
        "CPU requests must fit",
        [node("a", cpu_m=2000), node("b", cpu_m=10_000)],
        [*filler("b", 8)],
        pod("new", None, workload="new", cpu_request_m=2500),
        None,
        reason_has="2 Insufficient cpu",
    ),
    Case(
        "memory requests must fit",
        [node("a", memory=GI), node("b")],
        filler("b", 9),
        pod("new", None, workload="new", memory_request=2 * GI),
        "b",
    ),
    Case(
        "pod capacity must fit",
        [node("a", max_pods=2), node("b")],
        [*filler("a", 2, cpu_m=10), *filler("b", 5)],
        pod("new", None, workload="new"),
        "b",
    ),
    Case(
        "a pod requesting no CPU fits on a node whose CPU is fully requested",
        [node("a", cpu_m=1000)],
        filler("a", 1),
        pod("new", None, workload="new", cpu_request_m=0),
        "a",
    ),
    Case(
        "excluded nodes are not considered",
        [node("a"), node("b"), node("c")],
        [_moved, *filler("a", 2), *filler("b", 3), *filler("c", 4)],
        _moved,
        "b",
        vacate=True,
        exclude=("a",),
    ),
    Case(
        "nothing fits: the reason names the filters",
        [node("a", taints=[HARD]), node("b", unschedulable=True)],
        [],
        pod("new", None, workload="new"),
        None,
        reason_has="0/2 nodes are available",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_placement(case: Case) -> None:
    scheduled = model(case.nodes, case.pods).place(case.new, vacate=case.vacate, exclude=case.exclude)
    assert scheduled.node == case.expected, scheduled
    assert case.reason_has in scheduled.reason


def test_score_of_one_pod_on_an_empty_node_matches_the_scheduler_arithmetic() -> None:
    # fit: cpu (10000-1000)*100//10000 = 90, memory 63*100//64 = 98 -> 94; balanced: how much the pod improves
    # the balance, 50 + (50 + with - without) // 2: with the pod |0.1 - 1/64|/2 -> 95, without 100 -> 72;
    # taint: no PreferNoSchedule anywhere -> 100 x 3; spread: one node, min = max -> 100 x 2
    scores = model([node("a")], []).scores(pod("new", None, cpu_request_m=1000, memory_request=GI))
    assert scores == {"a": 94 + 72 + 300 + 200}


def test_balanced_allocation_scores_how_much_the_pod_improves_the_balance() -> None:
    # a holds 9000m and no memory: with the pod (9500m, 32Gi) |0.95 - 0.5|/2 -> 77, without |0.9 - 0|/2 -> 55:
    # 50 + (50 + 22) // 2 = 86. b is empty: with the pod |0.05 - 0.5|/2 -> 77, without 100: 50 + (27 // 2) = 63.
    # c holds 32Gi: with the pod |0.05 - 1|/2 -> 52, without |0 - 0.5|/2 -> 75: 50 + 27 // 2 = 63
    nodes = [node("a"), node("b"), node("c")]
    held = [pod("a-f", "a", workload="a-f", cpu_request_m=9000, memory_request=0),
            pod("c-f", "c", workload="c-f", cpu_request_m=0, memory_request=32 * GI)]  # fmt: skip
    new = pod("new", None, cpu_request_m=500, memory_request=32 * GI)
    # least allocated on non-zero requests (a-f counts 200Mi, c-f 100m): a (5 + 49) // 2, b (95 + 50) // 2,
    # c (94 + 0) // 2
    fit = {"a": 27, "b": 72, "c": 47}
    scores = model(nodes, held).scores(new)
    assert {n: s - 300 - 200 - fit[n] for n, s in scores.items()} == {"a": 86, "b": 63, "c": 63}


def test_a_pod_requesting_nothing_gets_no_balanced_allocation_score() -> None:
    # the scheduler skips BalancedAllocation for it; fit on the non-zero defaults: cpu (10000-100)*100//10000 =
    # 99, memory (64Gi - 200Mi)*100//64Gi = 99 -> 99; taint 3 x 100; spread 2 x 100
    scores = model([node("a")], []).scores(pod("new", None, cpu_request_m=0, memory_request=0))
    assert scores == {"a": 99 + 0 + 300 + 200}


def test_without_vacating_the_pod_still_counts_on_its_node() -> None:
    nodes = [node("a"), node("b"), node("c")]
    m = model(nodes, [_moved, *filler("a", 2), *filler("b", 3), *filler("c", 3)])
    assert m.place(_moved).node == "b"  # a holds 3 pods + web-1's spread count; b and c tie on 3 -> b by name
    assert m.place(_moved, vacate=True).node == "a"


def test_seeded_rng_picks_among_ties_reproducibly() -> None:
    m = model([node(n) for n in "abcdef"], [])
    new = pod("new", None)
    assert m.place(new).tied == tuple("abcdef")
    picks = [m.place(new, rng=random.Random(seed)).node for seed in range(40)]
    assert len(set(picks)) > 1
    assert picks == [m.place(new, rng=random.Random(seed)).node for seed in range(40)]


def test_remove_and_add_keep_the_model_current() -> None:
    nodes = [node("a"), node("b")]
    m = model(nodes, [_moved, *filler("b", 1)])
    assert m.node_of(_moved) == "a"
    m.remove(_moved)
    assert m.node_of(_moved) is None
    m.add(_moved, "b")
    assert m.scores(pod("new", None)) == model(
        nodes, [pod("web-1", "b", workload="web", cpu_request_m=1000), *filler("b", 1)]
    ).scores(pod("new", None))


def prefers(*terms: tuple[int, str, str]) -> tuple[PreferredTerm, ...]:
    return tuple(PreferredTerm(w, NodeSelectorTerm((Requirement(k, "In", (v,)),))) for w, k, v in terms)


def test_preferred_node_affinity_adds_the_matched_weights_normalized_over_the_feasible_nodes() -> None:
    nodes = [node("a", labels={"pool": "general"}), node("b", labels={"pool": "memory", "disk": "ssd"}),
             node("c", labels={"pool": "memory"})]  # fmt: skip
    plain = pod("new", None, workload="new", cpu_request_m=500)
    keen = msgspec.structs.replace(
        plain, preferred_affinity=prefers((80, "pool", "memory"), (20, "disk", "ssd"), (5, "gpu", "yes"))
    )
    m = model(nodes, filler("b", 2))  # b the most requested: without preferences it scores lowest
    base = m.scores(plain)
    # raw 0 / 100 / 80, the highest feasible 100: 0, 100, 80, times the weight 2
    assert {n: s - base[n] for n, s in m.scores(keen).items()} == {"a": 0, "b": 200, "c": 160}
    assert m.place(keen).node == "b" and m.landing_distribution(keen).as_dict() == {"b": 1.0}
    assert m.place(plain).node != "b" and max_score(keen) == 900 and max_score(plain) == 700
    tainted = model([nodes[0], msgspec.structs.replace(nodes[1], taints=(HARD,)), nodes[2]], filler("b", 2))
    # b infeasible: c has the highest feasible raw score (80), normalized to 100
    assert {n: s - tainted.scores(plain)[n] for n, s in tainted.scores(keen).items()} == {"a": 0, "c": 200}


def test_a_terminating_pod_keeps_its_requests_but_leaves_the_spreading_and_restore_undoes_it() -> None:
    nodes = [node("a"), node("b")]
    m = model(nodes, [_moved, *filler("b", 1)])
    sibling = pod("web-2", None, workload="web", cpu_request_m=1000)
    stranger = pod("new", None, workload="new", cpu_request_m=1000)
    before = m.scores(sibling), m.scores(stranger)
    m.terminate(_moved)
    assert m.node_of(_moved) is None
    # the stranger scores a and b as before (requests unchanged); web's spreading no longer counts web-1 on a
    assert m.scores(stranger) == before[1]
    gone = model(nodes, [pod("x", "a", workload="x", cpu_request_m=1000), *filler("b", 1)])
    assert m.scores(sibling) == gone.scores(sibling) != before[0]
    m.restore(_moved, "a")
    assert m.node_of(_moved) == "a" and (m.scores(sibling), m.scores(stranger)) == before


@settings(max_examples=60, deadline=None)
@given(
    placements=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 3000)), min_size=1, max_size=12),
    removed=st.sets(st.integers(0, 11)),
)
def test_updates_equal_a_fresh_model(placements: list[tuple[int, int, int]], removed: set[int]) -> None:
    """Removing pods from a model gives the same scores as a model built without them."""
    nodes = [node(n, labels={"topology.kubernetes.io/zone": f"z{i % 2}"}) for i, n in enumerate("abcd")]
    pods = [pod(f"p{i}", "abcd"[n], workload=f"w{w}", cpu_request_m=cpu) for i, (n, w, cpu) in enumerate(placements)]
    m = model(nodes, pods)
    probes = (pod("x", None, workload="w0", cpu_request_m=700), pod("y", None, workload=None))
    for probe in probes:  # answers the model may have cached before the updates
        m.place(probe)
    m.place(pods[0], vacate=True)
    for i in removed:
        if i < len(pods):
            m.remove(pods[i])
    kept = [p for i, p in enumerate(pods) if i not in removed]
    fresh = model(nodes, kept)
    for probe in probes:
        assert m.scores(probe) == fresh.scores(probe)
        assert m.place(probe) == fresh.place(probe)
    for moved in kept[:2]:  # the cached path of place agrees with the uncached scores
        scheduled = m.place(moved, vacate=True)
        assert scheduled == fresh.place(moved, vacate=True)
        assert scheduled.score == max(m.scores(moved, vacate=True).values(), default=0)


def test_every_chosen_node_passes_the_filters() -> None:
    nodes = [node("a", taints=[HARD]), node("b", cpu_m=1500), node("c", labels={"disk": "ssd"})]
    m = model(nodes, filler("b", 1))
    for probe in (pod("p", None, cpu_request_m=600), pod("q", None, node_selector={"disk": "ssd"})):
        assert m.place(probe).node == "c"


def test_replace_node_takes_a_new_taint_into_account() -> None:
    nodes = [node("a"), node("b"), node("c")]
    m = model(nodes, [_moved, *filler("a", 2), *filler("b", 3), *filler("c", 3)])
    assert m.place(_moved, vacate=True).node == "a"
    m.replace_node(node("a", taints=[PREFER]))  # the landing guard marks the relieved node
    assert m.place(_moved, vacate=True).node == "b"
    m.replace_node(node("a"))
    assert m.place(_moved, vacate=True).node == "a"
    m.replace_node(node("c", labels={"topology.kubernetes.io/zone": "z9"}))
    assert m.scores(_moved, vacate=True) == model(
        [node("a"), node("b"), node("c", labels={"topology.kubernetes.io/zone": "z9"})],
        [_moved, *filler("a", 2), *filler("b", 3), *filler("c", 3)],
    ).scores(_moved, vacate=True)


# --- landing distribution: the scheduler's random ties and its sample of feasible nodes ---------------


@pytest.mark.parametrize(
    ("all_nodes", "percentage", "expected"),
    [
        (50, None, 50),  # below 100 nodes: every node
        (99, 1, 99),
        (100, None, 100),  # 50% of 100 is 50, at least 100
        (500, None, 230),  # 50 - 500 / 125 = 46%
        (1666, None, 616),  # 37%
        (5000, None, 500),  # 10%
        (20_000, None, 1000),  # 50 - 160 < 5: 5%
        (5000, 0, 500),  # 0 is adaptive too
        (5000, 30, 1500),
        (5000, 1, 100),  # never fewer than 100
        (5000, 100, 5000),
    ],
)
def test_feasible_nodes_to_find_follows_the_scheduler(all_nodes: int, percentage: int | None, expected: int) -> None:
    assert feasible_nodes_to_find(all_nodes, percentage) == expected


def enumerated(scores: Sequence[int], sampled: int) -> list[Fraction]:
    """Every subset of ``sampled`` nodes, equally likely; its best nodes share the win equally."""
    wins = [Fraction(0)] * len(scores)
    subsets = list(itertools.combinations(range(len(scores)), sampled))
    for subset in subsets:
        best = max(scores[i] for i in subset)
        tied = [i for i in subset if scores[i] == best]
        for i in tied:
            wins[i] += Fraction(1, len(tied) * len(subsets))
    return wins


@pytest.mark.parametrize(
    "scores",
    [
        [5],
        [5, 5],
        [3, 5, 5, 1],
        [4, 4, 4, 2, 2, 1, 7],
        [9, 1, 1, 1, 1, 1, 1, 1],
        [2, 3, 2, 3, 2, 3, 2, 3, 0],
        [10**9, 0, 5, 5, -(10**9)],
    ],  # the last: scores spread too wide to count per value
)
def test_winning_probabilities_equal_the_enumeration_of_every_sample(scores: list[int]) -> None:
    for sampled in range(1, len(scores) + 1):
        exact = enumerated(scores, sampled)
        computed = winning_probabilities(np.array(scores, np.int64), sampled)
        assert computed.tolist() == pytest.approx([float(x) for x in exact], abs=1e-12), sampled


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=300), st.integers(1, 400))
def test_winning_probabilities_sum_to_one_and_never_favour_a_worse_node(scores: list[int], sampled: int) -> None:
    p = winning_probabilities(np.array(scores, np.int64), sampled)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert (p >= 0).all()
    by_score = sorted(zip(scores, p.tolist(), strict=True))
    for (low, p_low), (high, p_high) in itertools.pairwise(by_score):
        if high > low:
            assert p_high >= p_low - 1e-12, (low, high)
        else:
            assert p_high == pytest.approx(p_low, abs=1e-12)  # equal scores, equal chances


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=50), st.integers(0, 60))
def test_sampling_every_feasible_node_is_uniform_over_the_tied_best(scores: list[int], extra: int) -> None:
    p = winning_probabilities(np.array(scores, np.int64), len(scores) + extra)
    best = max(scores)
    tied = scores.count(best)
    assert p.tolist() == pytest.approx([1 / tied if s == best else 0.0 for s in scores], abs=1e-12)


def test_the_distribution_of_a_small_cluster_is_uniform_over_place_ties() -> None:
    m = model([node(n) for n in "abcdef"], [*filler("a", 1), *filler("b", 1)])
    new = pod("new", None, workload="new")
    spread = m.landing_distribution(new)
    assert spread.as_dict() == pytest.approx(dict.fromkeys(m.place(new).tied, 0.25))
    assert set(m.place(new).tied) == set("cdef")
    assert (spread.feasible, spread.sampled) == (6, 6)


def test_a_cluster_of_200_nodes_is_sampled_100_at_a_time() -> None:
    # a is the least requested; the 199 others tie: a wins whenever it is sampled, 100 of 200 nodes
    others = [f"n{i:03}" for i in range(199)]
    m = model([node("a"), *(node(n) for n in others)], [p for n in others for p in filler(n, 1)])
    spread = m.landing_distribution(pod("new", None, workload="new"))
    assert (spread.feasible, spread.sampled) == (200, 100)
    probabilities = spread.as_dict()
    assert probabilities["a"] == pytest.approx(0.5)
    assert probabilities["n000"] == pytest.approx(0.5 / 199)
    every = SchedulerModel(m_snapshot := snapshot([node("a")], [], usage({"a": 0})), percentage_of_nodes_to_score=100)
    assert every.sample_size == len(m_snapshot.nodes)


def test_the_distribution_follows_vacate_exclude_and_filters() -> None:
    nodes = [node("a"), node("b"), node("c", taints=[HARD])]
    m = model(nodes, [_moved, *filler("a", 1), *filler("b", 3)])
    assert m.landing_distribution(_moved, vacate=True).as_dict() == {"a": 1.0}
    assert m.landing_distribution(_moved, vacate=True, exclude=("a",)).as_dict() == {"b": 1.0}
    nothing = m.landing_distribution(_moved, exclude=("a", "b"))
    assert nothing.as_dict() == {} and nothing.feasible == 0
    assert "0/3 nodes are available" in nothing.reason


def straightforward_spread(m: SchedulerModel, probe: Pod, where: int | None, feasible: np.ndarray) -> np.ndarray:
    """PodTopologySpread node by node over every node, as the scheduler writes it (the oracle of the
    model's per-zone computation)."""
    size = len(m.names)
    if probe.workload is None:
        return np.zeros(size, np.int64)
    on_node = np.zeros(size, np.int64)
    for i, n in m.workload_counts(probe.workload).items():
        on_node[i] = n
    if where is not None and not probe.terminating:
        on_node[where] -= 1
    raw = on_node * math.log(int(feasible.sum()) + 2) + 2
    if m._zones:
        _, affine, _ = m._constraint_masks(probe)
        zone = m._zone
        counted = (zone >= 0) & affine
        per_zone = np.bincount(zone[counted], weights=on_node[counted], minlength=m._zones)
        domains = int(np.count_nonzero(np.bincount(zone[feasible & (zone >= 0)], minlength=m._zones)))
        raw = raw + np.where(zone >= 0, per_zone[np.maximum(zone, 0)] * math.log(domains + 2) + 4, 0.0)
    score = np.floor(raw + 0.5).astype(np.int64)
    if not feasible.any():
        return score
    low, high = int(score[feasible].min()), int(score[feasible].max())
    if high == 0:
        return np.full(size, 100, np.int64)
    return np.asarray((100 * (high + low - score)) // high, np.int64)


@settings(max_examples=150, deadline=None)
@given(
    zones=st.lists(st.sampled_from(["z0", "z1", "z2", None]), min_size=1, max_size=9),
    placements=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2), st.booleans()), max_size=40),
    feasible_bits=st.lists(st.booleans(), min_size=9, max_size=9),
    probe_workload=st.sampled_from(["w0", "w1", "w2", "w9", None]),
    vacate_from=st.one_of(st.none(), st.integers(0, 39)),
    selector=st.booleans(),
)
def test_spreading_per_zone_equals_the_node_by_node_computation(
    zones: list[str | None],
    placements: list[tuple[int, int, bool]],
    feasible_bits: list[bool],
    probe_workload: str | None,
    vacate_from: int | None,
    selector: bool,
) -> None:
    """The spreading score computed once per zone and once per node holding the workload's pods equals
    the node-by-node computation, whatever nodes are feasible (none, some, all), zoneless nodes,
    terminating pods, a vacated pod and a selector limiting the counted nodes included."""
    names = [f"n{i}" for i in range(len(zones))]
    nodes = [
        node(n, labels={**({"topology.kubernetes.io/zone": z} if z else {}), "half": str(i % 2)})
        for i, (n, z) in enumerate(zip(names, zones, strict=True))
    ]
    pods = [
        pod(f"p{i}", names[n % len(names)], workload=f"w{w}", terminating=t) for i, (n, w, t) in enumerate(placements)
    ]
    m = model(nodes, pods)
    feasible = np.array(feasible_bits[: len(names)], np.bool_)
    selected = {"half": "0"} if selector else None
    if vacate_from is not None and vacate_from < len(pods):
        probe = pods[vacate_from]
        where: int | None = m.bound(probe)
    else:
        probe, where = pod("probe", None, workload=probe_workload, node_selector=selected), None
    expected = straightforward_spread(m, probe, where, feasible)
    assert m._spread(probe, where, feasible).tolist() == expected.tolist()


def random_cluster(
    rnd: random.Random,
    node_count: int,
    *,
    cpu_m: Sequence[int],
    zones: Sequence[str],
    pools: Sequence[str | None],
    tainted: float,
    workloads: int,
    requests: Sequence[int],
) -> tuple[list[Node], list[Pod]]:
    """``node_count`` nodes (a zone label on most when ``zones``, a PreferNoSchedule taint on a
    ``tainted`` share) and three pods a node of ``workloads`` workloads, drawn from ``rnd``."""
    nodes = [
        node(
            f"n{i:03}",
            cpu_m=rnd.choice(cpu_m),
            pool=rnd.choice(pools),
            labels={"topology.kubernetes.io/zone": rnd.choice(zones)} if zones and rnd.random() < 0.95 else {},
            taints=[PREFER] if rnd.random() < tainted else [],
        )
        for i in range(node_count)
    ]
    pods = [
        pod(
            f"p{j}",
            f"n{rnd.randrange(node_count):03}",
            workload=f"w{rnd.randrange(workloads)}",
            cpu_request_m=rnd.choice(requests),
        )
        for j in range(node_count * 3)
    ]
    return nodes, pods


@settings(max_examples=60, deadline=None)
@given(
    node_count=st.integers(100, 180),
    zone_count=st.integers(0, 3),
    requests=st.lists(st.sampled_from([100, 250, 500, 1000, 2000]), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    percentage=st.sampled_from([None, 1, 30, 100]),
    moves=st.integers(0, 60),
)
def test_the_ranked_distribution_is_the_full_one_without_the_nodes_never_reached(
    node_count: int, zone_count: int, requests: list[int], seed: int, percentage: int | None, moves: int
) -> None:
    """The distribution built from the class's ranking (the nodes that changed, the pod's own node and
    its workload's nodes scored exactly) gives every node it names the probability the full
    computation gives it, and the nodes it leaves out have at most EPSILON of probability together,
    whatever the zones, PreferNoSchedule taints, tied scores, sampling, and moves made since the
    ranking was built (node changes included)."""
    rnd = random.Random(seed)
    zones = [f"z{z}" for z in range(zone_count)]
    nodes, pods = random_cluster(
        rnd,
        node_count,
        cpu_m=(8_000, 16_000),
        zones=zones,
        pools=(None,),
        tainted=0.1,
        workloads=25,
        requests=requests,
    )
    m = SchedulerModel(
        snapshot(nodes, pods, usage({n.name: 0 for n in nodes})), percentage_of_nodes_to_score=percentage
    )
    for step in range(moves + 1):
        probe = rnd.choice(pods)
        vacate = rnd.random() < 0.8
        fast = m.landing_distribution(probe, vacate=vacate)
        full = m.full_distribution(probe, vacate=vacate)
        assert (fast.feasible, fast.sampled) == (full.feasible, full.sampled)
        by_node = dict(
            zip(full.index.tolist(), zip(full.probabilities.tolist(), full.scores.tolist(), strict=True), strict=True)
        )
        named = fast.index.tolist()
        assert named == sorted(named)
        for i, p, score in zip(named, fast.probabilities.tolist(), fast.scores.tolist(), strict=True):
            assert by_node[i] == (pytest.approx(p, rel=1e-12, abs=1e-300), score), (step, i)
        left_out = sum(p for i, (p, _) in by_node.items() if i not in set(named))
        assert left_out <= EPSILON
        moved = rnd.choice(pods)
        target = rnd.choice(nodes)
        m.remove(moved)
        m.add(moved, target.name)
        if rnd.random() < 0.05:  # a node gains or loses a PreferNoSchedule taint (a landing guard's mark)
            changed = rnd.choice(nodes)
            m.replace_node(msgspec.structs.replace(changed, taints=() if changed.taints else (PREFER,)))


def test_a_node_freed_into_feasibility_with_an_untolerated_taint_renormalizes_every_score() -> None:
    """The ranking's taint scores are normalized by the most untolerated taints on a feasible node. A full
    node carrying a PreferNoSchedule taint does not count; once a pod leaves it, it does, and every
    node's taint score changes: the answer is computed node by node then, and equals the full one."""
    nodes = [node("a", cpu_m=1_000, taints=[PREFER]), *(node(f"n{i}", cpu_m=4_000) for i in range(3))]
    full = pod("full", "a", workload="f", cpu_request_m=1_000)
    m = model(nodes, [full, *filler("n0", 1), *filler("n1", 2)])
    new = pod("new", None, workload="new", cpu_request_m=500)
    before = m.landing_groups(new)
    assert before.serial >= 0 and "a" not in m.landing_distribution(new).as_dict()  # a is full
    m.remove(full)
    after = m.landing_groups(new)
    assert after.serial == -1  # the node-by-node answer
    assert m.landing_distribution(new).as_dict() == pytest.approx(m.full_distribution(new).as_dict())
    assert m.scores(new)["a"] < m.scores(new)["n2"]  # a's taint now costs it the PreferNoSchedule score


def test_a_query_after_64_other_pod_classes_reads_its_rebuilt_ranking_not_the_old_one() -> None:
    """Rankings are dropped when 64 pod classes have one; what a query kept of the changed nodes (their
    buckets) belongs to the ranking it was made for, so after the drop it is made again: the answer
    stays the full one (it once duplicated nodes and shifted probabilities up to eightfold)."""
    rnd = random.Random(1)
    nodes, pods = random_cluster(
        rnd,
        120,
        cpu_m=(16_000,),
        zones=("z0", "z1", "z2"),
        pools=(None,),
        tainted=0.0,
        workloads=10,
        requests=(250, 500),
    )
    m = SchedulerModel(snapshot(nodes, pods, usage({n.name: 0 for n in nodes})))
    probe = pods[0]
    m.landing_groups(probe, vacate=True)  # the probe's class is ranked
    for k in range(1, 6):  # then nodes change: the ranking's entries for them are stale
        m.remove(pods[k])
        m.add(pods[k], nodes[(k * 7) % 120].name)
    m.landing_groups(probe, vacate=True)
    for c in range(64):  # 64 other classes: every ranking is dropped
        m.landing_groups(pod(f"o{c}", None, workload=None, cpu_request_m=1000 + c))
    fast = m.landing_distribution(probe, vacate=True)
    full = m.full_distribution(probe, vacate=True).as_dict()
    assert len(set(fast.index.tolist())) == len(fast.index)
    assert fast.as_dict() == pytest.approx({n: p for n, p in full.items() if p > EPSILON}, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), moves=st.integers(0, 30))
def test_workloads_counted_when_first_asked_from_the_cache_groups_equal_the_counts_made_up_front(
    seed: int, moves: int
) -> None:
    """With the facts grouped by workload (the serve mode's watch cache), a workload's pods are counted
    when first asked, moves before that included: every landing equals the one of a model that counted
    every pod up front (unbound, terminating and off-cluster pods among them)."""

    rnd = random.Random(seed)
    nodes, pods = random_cluster(
        rnd, 100, cpu_m=(16_000,), zones=("z0", "z1"), pools=(None,), tainted=0.0, workloads=12, requests=(250, 500)
    )
    pods += [pod("away", "gone-node", workload="w1"), pod("pending", None, workload="w2")]
    pods += [pod(f"t{j}", f"n{j:03}", workload="w3", terminating=True) for j in range(3)]
    report = usage({n.name: 0 for n in nodes})
    by_workload: dict[WorkloadRef, list[Pod]] = {}
    for p in pods:
        if p.workload is not None:
            by_workload.setdefault(p.workload, []).append(p)
    grouped = ClusterFacts(
        tuple(nodes),
        tuple(pods),
        (),
        by_node=group_pods(pods),
        by_workload={w: tuple(members) for w, members in by_workload.items()},
    )
    lazy = SchedulerModel(build_snapshot(grouped, report, PoolSettings(label="pool"), 1_700_000_000.0))
    eager = SchedulerModel(snapshot(nodes, pods, report))
    for _ in range(moves):  # moves before and between the first questions
        moved, target = rnd.choice(pods[:-5]), rnd.choice(nodes).name
        for m in (lazy, eager):
            m.remove(moved)
            m.add(moved, target)
        probe = rnd.choice(pods)
        assert (
            lazy.landing_distribution(probe, vacate=True).as_dict()
            == eager.landing_distribution(probe, vacate=True).as_dict()
        )
    for w in {p.workload for p in pods if p.workload is not None}:
        assert {i: c for i, c in lazy.workload_counts(w).items() if c} == {
            i: c for i, c in eager.workload_counts(w).items() if c
        }


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), unrequested=st.floats(0.0, 1.0))
def test_a_model_from_the_grouped_request_sums_equals_one_summed_pod_by_pod(seed: int, unrequested: float) -> None:
    """The scheduler model reads a node's request sums from the snapshot's groups (the watch cache keeps
    them): every score and landing equals those of a model that summed each node's pods itself, pods
    requesting no CPU or no memory (scored with the scheduler's defaults) among them."""
    rnd = random.Random(seed)
    nodes, pods = random_cluster(
        rnd, 60, cpu_m=(8_000, 16_000), zones=("z0",), pools=(None,), tainted=0.0, workloads=5, requests=(0, 500)
    )
    pods = [
        msgspec.structs.replace(p, memory_request=0 if rnd.random() < unrequested else rnd.choice((GI, 2 * GI)))
        for p in pods
    ]
    grouped = snapshot(nodes, pods, usage({n.name: 0 for n in nodes}))
    assert grouped.groups is not None
    summed = replace(grouped, groups=None)
    from_groups, from_pods = SchedulerModel(grouped), SchedulerModel(summed)
    for probe in (pods[0], pod("new", None, cpu_request_m=0), pod("big", None, cpu_request_m=3000, memory_request=GI)):
        assert from_groups.scores(probe) == from_pods.scores(probe)
        assert (
            from_groups.landing_distribution(probe, vacate=True).as_dict()
            == from_pods.landing_distribution(probe, vacate=True).as_dict()
        )
