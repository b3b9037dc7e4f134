"""The planner's landing verdicts, counted per score group and ranking bucket, against the same
verdicts counted node by node on the full distribution, on clusters large enough for the scheduler
to sample nodes."""

from __future__ import annotations

import random
import re

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rebalancer.planning.plan import NodeClass
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.scheduler_sampling import EPSILON
from strategies.landing import TOLERANCE, LandingPredictor, LandingVerdict
from tests.builders import node, pod, snapshot, usage
from tests.unit.test_scheduler_model import random_cluster

KINDS = ("ok", "back", "elsewhere", "no-room")


@settings(max_examples=40, deadline=None)
# bad masses within TOLERANCE of each other, the first kind winning (back, elsewhere, no-room in that order)
@example(node_count=114, seed=25522281, same_pool=False, cap=0.0, percentage=None, queries=15)  # elsewhere
@example(node_count=121, seed=20, same_pool=False, cap=0.0, percentage=None, queries=10)  # back
@example(node_count=117, seed=117, same_pool=True, cap=0.0, percentage=None, queries=29)  # back
@example(node_count=117, seed=2240, same_pool=False, cap=0.0, percentage=None, queries=4)  # elsewhere
@example(node_count=108, seed=108, same_pool=False, cap=0.0, percentage=None, queries=27)  # back
@example(node_count=106, seed=200, same_pool=False, cap=0.1, percentage=None, queries=16)  # elsewhere
@example(node_count=111, seed=12915808, same_pool=False, cap=0.9, percentage=None, queries=5)  # back
@given(
    node_count=st.integers(100, 160),
    seed=st.integers(0, 2**32 - 1),
    same_pool=st.booleans(),
    cap=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
    percentage=st.sampled_from([None, 1, 100]),
    queries=st.integers(1, 40),
)
def test_each_landing_verdict_equals_the_node_by_node_count(
    node_count: int, seed: int, same_pool: bool, cap: float, percentage: int | None, queries: int
) -> None:
    """Accepted or refused, the landing node (the most probable good one, first by name), the refusal's
    kind (the likeliest kind of bad landing) and the named bad landings (most probable first, by name
    among equals) are those of the node-by-node count, through accepted moves that change rooms and
    scores (rankings rebuilt, nodes scored exactly)."""
    rnd = random.Random(seed)
    nodes, pods = random_cluster(
        rnd,
        node_count,
        cpu_m=(16_000,),
        zones=("z0", "z1", "z2"),
        pools=("a", "b"),
        tainted=0.05,
        workloads=30,
        requests=(250, 500),
    )
    snap = snapshot(nodes, pods, usage({n.name: 0 for n in nodes}))
    classes = [rnd.choice([NodeClass.HOT, NodeClass.NORMAL, NodeClass.COLD, NodeClass.COLD]) for _ in nodes]
    room = {
        n.name: rnd.choice([0, 300, 800, 3000]) for n, c in zip(nodes, classes, strict=True) if c is not NodeClass.HOT
    }
    predictor = LandingPredictor(
        snap,
        {n.name: c for n, c in zip(nodes, classes, strict=True)},
        room,
        same_pool=same_pool,
        max_risk=cap,
        percentage_of_nodes_to_score=percentage,
    )
    oracle = SchedulerModel(snap, percentage_of_nodes_to_score=percentage)
    rooms = dict(room)
    for _ in range(queries):
        moved = rnd.choice(pods)
        source = oracle.node_of(moved)
        assert source is not None
        usage_m = rnd.choice([100, 500, 1000])
        landing = predictor.land(moved, source, usage_m)
        spread = oracle.full_distribution(moved, vacate=True)

        def kind(name: str, source: str = source, usage_m: int = usage_m) -> str:
            if name == source:
                return "back"
            if name not in rooms or (same_pool and snap.pool_of[name] != snap.pool_of[source]):
                return "elsewhere"
            return "ok" if rooms[name] >= usage_m else "no-room"

        chances = [
            (p, spread.names[i], kind(spread.names[i]))
            for i, p in zip(spread.index.tolist(), spread.probabilities.tolist(), strict=True)
        ]
        masses = {k: sum(p for p, _, kk in chances if kk == k) for k in KINDS}
        risk = 1.0 - masses["ok"]
        if spread.feasible == 0:
            assert landing.refused is LandingVerdict.UNSCHEDULABLE
            continue
        if abs(risk - cap) < 1e-9 + TOLERANCE:
            continue  # float sums in another order may fall either side of the cap
        if risk > cap:
            assert landing.node is None
            bad = {k: masses[k] for k in KINDS[1:]}
            # the predictor's tie rule: the first kind (in the order of KINDS) within TOLERANCE of the most
            # probable; a gap at TOLERANCE itself may fall either side with float sums in another order
            gaps = [max(bad.values()) - mass for mass in bad.values()]
            if all(abs(gap - TOLERANCE) > 1e-12 for gap in gaps):
                worst = next(k for k, gap in zip(bad, gaps, strict=True) if gap <= TOLERANCE)
                assert landing.refused == LandingVerdict(worst), (bad, landing.reason)
            # the nodes reached with at most EPSILON together may be left out (or named after these)
            named = [n for _, n in sorted((-p, n) for p, n, k in chances if k != "ok" and p > EPSILON)][:3]
            said = re.findall(r"(?:back on|on(?: [a-z]+)?) (n\d{3}) ", landing.reason)
            assert said[: len(named)] == named and len(named) <= len(said) <= 3, landing.reason
            continue
        good = [(p, n) for p, n, k in chances if k == "ok"]
        top = max(p for p, _ in good)
        assert landing.node == min(n for p, n in good if p == top), landing.reason
        predictor.commit(moved, landing.node, usage_m)
        oracle.terminate(moved)
        oracle.add(moved, landing.node)
        rooms[landing.node] -= usage_m


def test_a_cap_just_below_one_still_refuses_a_pod_with_no_good_landing() -> None:
    """maxLandingRisk may be anything below 1: with no destination at all the risk is 1, within a
    cap of 1 - 5e-10 plus the float tolerance, and the pod is still passed over (it once raised, and
    before that landed on its own node)."""
    nodes = [node(n, cpu_m=16_000) for n in ("n0", "n1", "n2")]
    moved = pod("p", "n0", workload="w", cpu_request_m=100)
    snap = snapshot(nodes, [moved], usage({n.name: 0 for n in nodes}))
    classes = {"n0": NodeClass.HOT, "n1": NodeClass.NORMAL, "n2": NodeClass.NORMAL}
    landing = LandingPredictor(snap, classes, {}, same_pool=False, max_risk=0.9999999995).land(moved, "n0", 100)
    assert landing.node is None and landing.refused is LandingVerdict.ELSEWHERE, landing.reason  # 2 of 3 nodes
    assert landing.reason.startswith("predicted landing risk 100% > maxLandingRisk >99.9%: back on n0 33% ")


def test_chances_are_the_distribution_land_judges() -> None:
    """``chances``: every node's probability, as the model's node-by-node distribution gives it (the pod
    evicted and terminating), through a committed move."""
    rnd = random.Random(7)
    nodes, pods = random_cluster(rnd, 120, cpu_m=(16_000,), zones=("z0", "z1"), pools=("a",), tainted=0.05,
                                 workloads=12, requests=(250, 500))  # fmt: skip
    snap = snapshot(nodes, pods, usage({n.name: 0 for n in nodes}))
    room = {n.name: 10_000 for n in nodes}
    predictor = LandingPredictor(snap, dict.fromkeys(room, NodeClass.COLD), room, same_pool=False, max_risk=1.0)
    oracle = SchedulerModel(snap)
    for moved in rnd.sample(pods, 5):
        source = oracle.node_of(moved)
        assert source is not None
        chances = predictor.chances(moved, source)
        expected = {n: p for n, p in oracle.full_distribution(moved, vacate=True).as_dict().items() if p > EPSILON}
        assert {n: p for n, p in chances.items() if p > EPSILON}.keys() == expected.keys()
        assert all(abs(chances[n] - p) < 1e-9 for n, p in expected.items())
        landing = predictor.land(moved, source, 100)
        assert landing.node is not None and landing.node != source
        predictor.commit(moved, landing.node, 100)
        oracle.terminate(moved)
        oracle.add(moved, landing.node)
