"""Where replacements of evicted pods went: matched to their evictions, landed back, prediction hits."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.domain.efficiency_records import EfficiencyState, EvictedPod, Relief
from rebalancer.domain.model import ClusterFacts, Pod
from rebalancer.records import CLUSTER, compute_rates
from rebalancer.records.landings import observe_landings
from tests.builders import node, pod

T0 = 1_700_000_000.0
WINDOW = 900.0
WEB = "Deployment/default/web"


def relief(node_name: str, at: float, *evicted: tuple[str, str | None, str | None], pool: str = "general") -> Relief:
    """``evicted``: (pod name, workload, predicted landing)."""
    pods = tuple(EvictedPod("default", name, workload, 500, T0 - 3600, predicted=p) for name, workload, p in evicted)
    return Relief(node_name, pool, "LowNodeUtilization", at, 70.0, 90.0, pods, at + WINDOW)


def new_pod(name: str, node_name: str | None, created: float, workload: str = "web") -> Pod:
    return msgspec.structs.replace(pod(name, node_name, workload=workload), created=created)


def facts(*pods: Pod, grouped: bool = False) -> ClusterFacts:
    nodes = tuple(node(n) for n in ("hot", "cold", "warm"))
    if not grouped:
        return ClusterFacts(nodes, pods)
    by_workload: dict = {}
    for p in pods:
        by_workload.setdefault(p.workload, []).append(p)
    return ClusterFacts(nodes, pods, by_workload={w: tuple(ps) for w, ps in by_workload.items()})


def landed(state: EfficiencyState) -> list[tuple[str, str | None, str | None]]:
    return [(p.name, p.landed, p.replacement) for r in state.reliefs for p in r.evicted]


def test_replacements_are_matched_oldest_first_in_creation_order_and_claimed_once():
    state = EfficiencyState(
        reliefs=(
            relief("hot", T0, ("web-1", WEB, "cold")),
            relief("warm", T0 + 60, ("web-2", WEB, "cold")),
        )
    )
    cluster = facts(
        new_pod("web-old", "hot", T0 - 7200),  # older than both evictions: not a replacement
        new_pod("web-b", "cold", T0 + 65),
        new_pod("web-a", "hot", T0 + 1),
    )
    for grouped in (False, True):
        after = observe_landings(state, facts(*cluster.pods, grouped=grouped), T0 + 120, WINDOW)
        assert landed(after) == [("web-1", "hot", "default/web-a"), ("web-2", "cold", "default/web-b")]
        again = observe_landings(after, cluster, T0 + 180, WINDOW)
        assert again == after  # already observed: nothing claimed twice


def test_a_pending_replacement_waits_and_a_pod_created_after_the_window_is_not_taken():
    state = EfficiencyState(reliefs=(relief("hot", T0, ("web-1", WEB, "cold")),))
    pending = observe_landings(state, facts(new_pod("web-a", None, T0 + 2)), T0 + 30, WINDOW)
    assert landed(pending) == [("web-1", None, None)]
    bound = observe_landings(pending, facts(new_pod("web-a", "cold", T0 + 2)), T0 + 60, WINDOW)
    assert landed(bound) == [("web-1", "cold", "default/web-a")]
    late = observe_landings(state, facts(new_pod("web-a", "cold", T0 + 2)), T0 + 6 * 3600, WINDOW)
    assert landed(late) == [("web-1", "cold", "default/web-a")]  # a CronJob's next run: by creation time
    scaled_up = observe_landings(state, facts(new_pod("web-z", "cold", T0 + WINDOW + 1)), T0 + 6 * 3600, WINDOW)
    assert landed(scaled_up) == [("web-1", None, None)]  # created after the window: not taken for it


def test_bare_pods_and_other_workloads_are_not_taken_for_replacements():
    state = EfficiencyState(reliefs=(relief("hot", T0, ("solo", None, None), ("web-1", WEB, None)),))
    after = observe_landings(state, facts(new_pod("api-a", "hot", T0 + 1, workload="api")), T0 + 30, WINDOW)
    assert landed(after) == [("solo", None, None), ("web-1", None, None)]


def test_rates_count_landed_back_and_prediction_hits_per_pool():
    state = EfficiencyState(
        reliefs=(
            relief("hot", T0, ("web-1", WEB, "cold"), ("web-2", WEB, "cold")),
            relief("warm", T0 + 60, ("web-3", WEB, None), pool="other"),
        )
    )
    cluster = facts(
        new_pod("web-a", "hot", T0 + 1),  # back where it came from, against the prediction
        new_pod("web-b", "cold", T0 + 2),  # as predicted
        new_pod("web-c", "cold", T0 + 61),  # no prediction: counts as seen, not as a hit or a miss
    )
    rates = compute_rates(observe_landings(state, cluster, T0 + 120, WINDOW), None, {}, T0 - 1, T0 + 3600)
    c = rates.pool(CLUSTER)
    assert (c.landed, c.landed_back, c.predicted_landed, c.landing_hits) == (3, 1, 2, 1)
    assert c.landed_back_rate == 1 / 3 and c.landing_hit_rate == 0.5
    other = rates.pool("other")
    assert (other.landed, other.landed_back, other.predicted_landed) == (1, 0, 0)
    assert other.landing_hit_rate is None  # nothing predicted: no rate, never 0


def test_landing_fields_survive_the_records_round_trip():
    state = observe_landings(
        EfficiencyState(reliefs=(relief("hot", T0, ("web-1", WEB, "cold")),)),
        facts(new_pod("web-a", "cold", T0 + 1)),
        T0 + 30,
        WINDOW,
    )
    assert EfficiencyState.from_json(state.to_json(), T0 + 60) == state


@given(
    evictions=st.lists(st.tuples(st.integers(0, 600), st.sampled_from(["hot", "warm"])), min_size=1, max_size=6),
    created=st.lists(st.tuples(st.integers(-100, 900), st.sampled_from(["hot", "cold", "warm", None])), max_size=8),
)
def test_property_each_replacement_is_a_later_bound_pod_claimed_by_one_eviction(evictions, created):
    reliefs = tuple(relief(n, T0 + at, (f"web-{i}", WEB, "cold")) for i, (at, n) in enumerate(sorted(evictions)))
    pods = tuple(new_pod(f"new-{i}", n, T0 + c) for i, (c, n) in enumerate(created))
    after = observe_landings(EfficiencyState(reliefs=reliefs), facts(*pods), T0 + 1000, WINDOW)
    by_name = {f"default/{p.name}": p for p in pods}
    claims = [(r.at, p) for r in after.reliefs for p in r.evicted if p.replacement is not None]
    assert len({p.replacement for _, p in claims}) == len(claims)
    for at, p in claims:
        taken = by_name[p.replacement or ""]
        assert taken.node_name == p.landed and at - 1.0 <= taken.created <= at + WINDOW
    unclaimed_bound = [p for p in pods if p.node_name and all(c.replacement != f"default/{p.name}" for _, c in claims)]
    waiting = [r.at for r in after.reliefs for p in r.evicted if p.replacement is None]
    for p in unclaimed_bound:  # a bound pod left over fits no eviction still waiting
        assert all(not (at - 1.0 <= p.created <= at + WINDOW) for at in waiting)
