"""The indexed room search decides exactly as a plain scan of every destination would (hypothesis).

``ScanTracker`` below is the search as it was before the index: the destinations in one sorted list of
(usage room, name), scanned node by node. Over random clusters and random sequences of searches,
commits, checkpoints, rollbacks and removals, ``RoomTracker`` must choose the same node with the same
reason text, or fail with the same reason text, in spread and in pack order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.domain.model import Node, Pod, Taint, Toleration
from rebalancer.domain.quantity import cores_text
from rebalancer.planning.scheduling import placement_blocker
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.placement import Placement, RoomTracker, Signature, signature
from strategies.room_index import BLOCK, Room, RoomIndex
from tests.builders import GI, node, pod, snapshot, usage

TAINT = Taint("dedicated", "x", "NoSchedule")


class ScanTracker:
    """The reference: one sorted list, every destination with usage room checked in turn."""

    def __init__(self, snap: ClusterSnapshot, caps_m: Mapping[str, int], *, pack: bool) -> None:
        self._nodes: dict[str, Node] = {}
        self._room: dict[str, list[int]] = {}
        self._pack = pack
        self._journal: list[tuple[str, int, int, int]] = []
        self._failed: dict[tuple[Signature, frozenset[str]], list[tuple[int, int, int]]] = {}
        for name, cap in caps_m.items():
            load = snap.load[name]
            if load.usage_m is None:
                continue
            n = snap.nodes[name]
            self._nodes[name] = n
            self._room[name] = [
                cap - load.usage_m,
                n.allocatable_cpu_m - load.requested_cpu_m,
                n.allocatable_memory - load.requested_memory,
                n.allocatable_pods - load.pod_count,
            ]

    def find(self, p: Pod, usage_m: int, exclude: Iterable[str] = ()) -> Placement:
        reasons: dict[str, int] = {}
        allowed = set()
        for name, n in self._nodes.items():
            why = placement_blocker(p, n)
            if why is None:
                allowed.add(name)
            else:
                reasons[why] = reasons.get(why, 0) + 1
        if not allowed:
            top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
            summary = "; ".join(f"{n} node(s): {why}" for why, n in top) or "no destination at all"
            return Placement(None, f"no destination accepts it ({summary})")
        excluded = allowed.intersection(exclude)
        memo = (signature(p), frozenset(excluded))
        need = (usage_m, p.cpu_request_m, p.memory_request)
        if any(all(a >= b for a, b in zip(need, failed, strict=True)) for failed in self._failed.get(memo, ())):
            return Placement(None, "no destination with room accepts it (a pod needing no more found none)")
        order = sorted((room[0], name) for name, room in self._room.items())
        order = order[bisect.bisect_left(order, (usage_m, "")) :]
        rejected: dict[str, int] = {}
        for room_m, name in order if self._pack else reversed(order):
            if name not in allowed or name in excluded:
                continue
            _, cpu_m, memory, pods = self._room[name]
            if p.cpu_request_m > cpu_m:
                why = "CPU requests would exceed allocatable"
            elif p.memory_request > memory:
                why = "memory requests would exceed allocatable"
            elif pods < 1:
                why = "pod capacity full"
            else:
                return Placement(name, f"{name} has {cores_text(room_m)} of real-usage room")
            rejected[why] = rejected.get(why, 0) + 1
        self._failed.setdefault(memo, []).append(need)
        if not rejected:
            return Placement(None, f"no destination has {cores_text(usage_m)} of real-usage room left")
        summary = "; ".join(f"{n} node(s): {why}" for why, n in sorted(rejected.items(), key=lambda kv: -kv[1])[:3])
        return Placement(None, f"no destination with room accepts it ({summary})")

    def commit(self, name: str, p: Pod, usage_m: int) -> None:
        self._apply(name, (usage_m, p.cpu_request_m, p.memory_request, 1))
        self._journal.append((name, usage_m, p.cpu_request_m, p.memory_request))

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        if len(self._journal) > checkpoint:
            self._failed.clear()
        while len(self._journal) > checkpoint:
            name, usage_m, cpu_m, memory = self._journal.pop()
            self._apply(name, (-usage_m, -cpu_m, -memory, -1))

    def remove(self, name: str) -> None:
        self._room.pop(name, None)
        self._nodes.pop(name, None)

    def _apply(self, name: str, taken: tuple[int, int, int, int]) -> None:
        self._room[name] = [have - take for have, take in zip(self._room[name], taken, strict=True)]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, dict[str, int]]:
    nodes, pods, node_usage = [], [], {}
    count = draw(st.integers(0, 120))
    for i in range(count):
        name = f"n{i:03d}"
        nodes.append(
            node(
                name,
                cpu_m=draw(st.sampled_from([2000, 4000, 8000])),
                pool=draw(st.sampled_from(["a", "a", "b"])),
                taints=[TAINT] if draw(st.integers(0, 5)) == 0 else [],
                unschedulable=draw(st.integers(0, 15)) == 0,
                memory=draw(st.sampled_from([2, 4, 8])) * GI,
                max_pods=draw(st.integers(0, 4)),
            )
        )
        if draw(st.integers(0, 10)):  # a few nodes without usage: never destinations
            node_usage[name] = draw(st.integers(0, 8000))
        for j in range(draw(st.integers(0, 3))):  # their requests: some nodes overcommitted
            pods.append(
                pod(
                    f"{name}-{j}",
                    name,
                    cpu_request_m=draw(st.sampled_from([0, 500, 1500, 3000])),
                    memory_request=draw(st.sampled_from([0, GI, 3 * GI])),
                )
            )
    snap = snapshot(nodes, pods, usage(node_usage))
    caps = {n.name: draw(st.integers(0, 9000)) for n in nodes if draw(st.integers(0, 6))}
    return snap, caps


@st.composite
def moving_pods(draw: st.DrawFn) -> Pod:
    return pod(
        "moving",
        "n000",
        cpu_request_m=draw(st.sampled_from([0, 100, 500, 1000, 2000, 3000])),
        memory_request=draw(st.sampled_from([0, GI // 2, GI, 2 * GI])),
        tolerations=[Toleration("dedicated", "Equal", "x", "NoSchedule")] if draw(st.integers(0, 4)) == 0 else [],
        node_selector={"pool": "b"} if draw(st.integers(0, 5)) == 0 else None,
    )


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("find"), moving_pods(), st.integers(0, 9000), st.lists(st.integers(0, 119), max_size=2)),
        st.tuples(st.just("commit"), moving_pods(), st.integers(0, 3000), st.integers(0, 119)),
        st.tuples(st.just("checkpoint")),
        st.tuples(st.just("rollback"), st.integers(0, 10)),
        st.tuples(st.just("remove"), st.integers(0, 119)),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(clusters(), st.booleans(), st.sampled_from([1, 2, 3, 8, BLOCK]), OPERATIONS)
def test_indexed_search_decides_as_a_plain_scan(
    cluster: tuple[ClusterSnapshot, dict[str, int]], pack: bool, block: int, operations: list[tuple[object, ...]]
) -> None:
    """Small blocks too, so that a cluster of a few dozen nodes has many blocks that split and vanish."""
    snap, caps = cluster
    tracker, reference = RoomTracker(snap, caps, pack=pack, block=block), ScanTracker(snap, caps, pack=pack)
    names = sorted(caps)
    checkpoints: list[int] = []
    last_found: str | None = None
    for op in operations:
        match op:
            case ("find", Pod() as p, int(usage_m), list(excluded)):
                exclude = [f"n{i:03d}" for i in excluded]
                found = tracker.find(p, usage_m, exclude=exclude)
                assert found == reference.find(p, usage_m, exclude=exclude), op
                last_found = found.node
            case ("commit", Pod() as p, int(usage_m), int(i)):
                # mostly onto the node just found, as the strategies do; sometimes anywhere still offered
                target = last_found or (names[i % len(names)] if names else None)
                if target is not None and target in reference._room:
                    tracker.commit(target, p, usage_m)
                    reference.commit(target, p, usage_m)
                last_found = None
            case ("checkpoint",):
                checkpoints.append(tracker.checkpoint())
                assert checkpoints[-1] == reference.checkpoint()
            case ("rollback", int(back)):
                if checkpoints:
                    point = checkpoints[-1 - back % len(checkpoints)]
                    tracker.rollback(point)
                    reference.rollback(point)
            case ("remove", int(i)):
                if names:  # as HighNodeUtilization does: once a drain is kept, never rolled back past
                    tracker.remove(names[i % len(names)])
                    reference.remove(names[i % len(names)])
                    checkpoints.clear()
        assert len(tracker) == len(reference._room)


@st.composite
def rooms(draw: st.DrawFn) -> dict[str, Room]:
    count = draw(st.integers(0, 40))
    values = st.integers(-3, 6)
    return {f"n{i:02d}": Room(draw(values), draw(values), draw(values), draw(values)) for i in range(count)}


@settings(max_examples=300, deadline=None)
@given(
    rooms(),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 39), st.integers(-3, 3), st.integers(-3, 3), st.booleans()), max_size=80),
    st.lists(st.tuples(st.integers(-4, 7), st.integers(-4, 7), st.integers(-4, 7), st.integers(-1, 2)), max_size=10),
)
def test_index_keeps_the_order_and_skips_only_nodes_without_room(
    by_name: dict[str, Room],
    block: int,
    changes: list[tuple[int, int, int, bool]],
    searches: list[tuple[int, int, int, int]],
) -> None:
    """Tiny blocks, so that blocks split and vanish: the keys stay in order, and a search with requests
    yields every key whose node has that room, in order, and otherwise only keys it would yield without."""
    index = RoomIndex(by_name, block)
    for i, usage_delta, cpu_delta, gone in changes:
        name = f"n{i:02d}"
        room = by_name.get(name)
        if room is None:
            continue
        index.discard((room.usage_m, name))
        if gone:
            del by_name[name]
            continue
        room.usage_m += usage_delta
        room.cpu_m += cpu_delta
        room.pods -= cpu_delta
        index.add((room.usage_m, name))
    keys = sorted((room.usage_m, name) for name, room in by_name.items())
    assert len(index) == len(keys)
    for usage_m, cpu_m, memory, pods in searches:
        every = [k for k in keys if k[0] >= usage_m]
        assert list(index.ascending_from(usage_m)) == every
        assert list(index.descending_to(usage_m)) == every[::-1]
        least = (cpu_m, memory, pods)
        pruned = list(index.ascending_from(usage_m, least))
        assert list(index.descending_to(usage_m, least)) == pruned[::-1]
        assert [k for k in every if k in set(pruned)] == pruned  # an ordered part of every key
        fitting = [k for k in every if _fits(by_name[k[1]], least)]
        assert [k for k in pruned if k in set(fitting)] == fitting  # with all that fit


def _fits(room: Room, least: tuple[int, int, int]) -> bool:
    return room.cpu_m >= least[0] and room.memory >= least[1] and room.pods >= least[2]
