"""The watch cache's pods by node and workload (PodGroups), kept event by event, against a regrouping.

Over random histories of a pod map (pods added, changed, moved from no node to a node, turned terminal,
deleted, the map listed again in another order): the groups the index keeps are exactly what
``group_pods`` makes of the map's pods (and, by workload, what filtering every pod gives); a cycle
planned on them (full, or focused on an alerted node) decides exactly what a cycle planned on the
regrouped pods decides, and the evictor counts the same replicas.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Hashable, Mapping

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import _replica_counts
from rebalancer.adapters.kube.pod_index import PodGroups
from rebalancer.domain.model import TERMINAL_PHASES, ClusterFacts, NodePods, Pod, UsageReport, WorkloadRef
from rebalancer.planning.snapshot import group_pods
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import pod
from tests.unit.test_planner_properties import clusters, policies

NODES = ["n0", "n1", "n2", None]
PHASES = ["Running", "Running", "Running", "Pending", "Succeeded", "Failed"]


class Model:
    """The pod map as the informer keeps it (a dict: a replaced key keeps its place) and its index."""

    def __init__(self) -> None:
        self.items: dict[Hashable, Pod] = {}
        self.index = PodGroups()

    def put(self, value: Pod) -> None:
        old = self.items.get(value.key)
        self.items[value.key] = value
        self.index.change(value.key, old, value)

    def delete(self, key: Hashable) -> None:
        old = self.items.pop(key, None)
        if old is not None:
            self.index.change(key, old, None)

    def relist(self, order: list[int]) -> None:
        values = list(self.items.values())
        self.items = {values[i].key: values[i] for i in order if i < len(values)}
        self.index.reset(self.items)


def regrouped(pods: list[Pod]) -> tuple[dict[str, NodePods], dict[WorkloadRef, tuple[Pod, ...]]]:
    by_workload: dict[WorkloadRef, list[Pod]] = {}
    for p in pods:
        if p.workload is not None and p.phase not in TERMINAL_PHASES:
            by_workload.setdefault(p.workload, []).append(p)
    return group_pods(pods), {w: tuple(members) for w, members in by_workload.items()}


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.integers(0, 12), st.sampled_from(NODES), st.sampled_from(PHASES), st.integers(0, 900)
        ),
        st.tuples(st.just("delete"), st.integers(0, 12)),
        st.tuples(st.just("relist"), st.permutations(range(13))),
        st.tuples(
            st.just("view"),
        ),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_the_index_holds_what_a_regrouping_makes(ops: list[tuple[object, ...]]) -> None:
    model = Model()
    for op in ops:
        if op[0] == "put":
            _, i, node, phase, cpu = op
            workload = ("web", "db", None)[int(str(i)) % 3]
            model.put(
                pod(f"p{i}", node and str(node), phase=str(phase), cpu_request_m=int(str(cpu)), workload=workload)
            )
        elif op[0] == "delete":
            model.delete(("default", f"p{op[1]}"))
        elif op[0] == "relist":
            model.relist([int(str(i)) for i in op[1]])
        else:
            assert model.index.view() == regrouped(list(model.items.values()))
    assert model.index.view() == regrouped(list(model.items.values()))


def by_key(p: Pod) -> tuple[str, str]:
    return p.key


def _sorted_groups(groups: Mapping[WorkloadRef, tuple[Pod, ...]]) -> dict[WorkloadRef, list[Pod]]:
    return {w: sorted(members, key=by_key) for w, members in groups.items() if members}


@st.composite
def histories(draw: st.DrawFn) -> tuple[ClusterFacts, UsageReport, ClusterFacts]:
    """A cluster, and the same cluster as a watch cache ends up holding it after a random history."""
    facts, report = draw(clusters())
    model = Model()
    for p in facts.pods:
        if draw(st.booleans()):  # seen first unbound, or in another phase, then as it is
            model.put(msgspec.structs.replace(p, node_name=None, phase=draw(st.sampled_from(PHASES))))
        if draw(st.integers(0, 5)) == 0:
            model.put(pod(f"gone-{p.name}", p.node_name))
        model.put(p)
    for key in [k for k in model.items if str(k[1]).startswith("gone-")]:
        model.delete(key)
    if draw(st.booleans()):
        model.relist(list(range(len(model.items))))
    listed = msgspec.structs.replace(facts, pods=tuple(model.items.values()))
    by_node, by_workload = model.index.view()
    return listed, report, msgspec.structs.replace(listed, by_node=by_node, by_workload=by_workload)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), policies())
def test_a_cycle_on_the_index_decides_as_a_cycle_on_regrouped_pods(
    history: tuple[ClusterFacts, UsageReport, ClusterFacts], pol: Policy
) -> None:
    listed, report, cached = history
    full_snapshot, full = plan_cycle(listed, report, pol, 1_700_000_000.0)
    cached_snapshot, from_cache = plan_cycle(cached, report, pol, 1_700_000_000.0)
    assert from_cache == full
    assert cached_snapshot.pods_by_node == full_snapshot.pods_by_node
    assert cached_snapshot.load == full_snapshot.load
    assert sorted(cached_snapshot.unbound, key=by_key) == sorted(full_snapshot.unbound, key=by_key)
    workloads = {p.workload for p in listed.pods if p.workload is not None}
    # a listing's snapshot groups its pods by workload as the watch cache does (in listing order)
    assert cached_snapshot.by_workload is not None and full_snapshot.by_workload is not None
    assert _sorted_groups(cached_snapshot.by_workload) == _sorted_groups(full_snapshot.by_workload)
    scanned = dataclasses.replace(full_snapshot, by_workload=None)  # the evictor's scan of every pod
    assert _replica_counts(cached_snapshot, workloads) == _replica_counts(scanned, workloads)
    assert _replica_counts(full_snapshot, workloads) == _replica_counts(scanned, workloads)
    for node in [n.name for n in listed.nodes]:
        focused = plan_cycle(listed, report, pol, 1_700_000_000.0, frozenset({node}))[1]
        assert plan_cycle(cached, report, pol, 1_700_000_000.0, frozenset({node}))[1] == focused
        assert all(e.node == node for e in focused.evictions)
    if full.evictions and pol.strategies[0].kind == "LowNodeUtilization":
        # the first node the full plan relieves had nothing taken before it: an alert on it alone decides the
        # same, up to the first eviction on another node (a later pass down to its receive threshold sees where
        # the other nodes' replacements are predicted to land, and may choose otherwise)
        first = full.evictions[0].node
        focused = plan_cycle(cached, report, pol, 1_700_000_000.0, frozenset({first}))[1]
        lead = tuple(itertools.takewhile(lambda e: e.node == first, full.evictions))
        if lead == tuple(e for e in full.evictions if e.node == first):
            assert focused.evictions == lead
        else:
            assert focused.evictions[: len(lead)] == lead
