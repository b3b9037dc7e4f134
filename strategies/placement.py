"""Room on concrete destination nodes, consumed as a plan is built (local working state only)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import msgspec

from rebalancer.domain.model import Node, Pod
from rebalancer.domain.quantity import cores_text
from rebalancer.planning.scheduling import placement_blocker
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.room_index import BLOCK, Key, Requests, Room, RoomIndex


class Placement(msgspec.Struct, frozen=True, gc=False):
    node: str | None
    reason: str  # why this node, or why none


Signature = tuple[object, ...]
Memo = tuple[Signature, frozenset[str]]  # what a failed search is remembered by: constraints, nodes left out
Need = tuple[int, int, int]  # usage, CPU request, memory request
REMEMBERED = "no destination with room accepts it (a pod needing no more found none)"


def signature(pod: Pod) -> Signature:
    """What decides, once and for all, which nodes a pod may run on (not how much room they have)."""
    return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_affinity)


class RoomTracker:
    """Destinations ordered by remaining real-usage room.

    ``find`` returns the destination with the most room (``spread``) or the least room that still fits
    (``pack``), checking requests, pod count, taints, selectors and affinity. Searches stay cheap on
    big clusters: the nodes a pod's constraints allow are computed once per constraint signature; a
    pod that needs at least as much as one that already found no room (same signature) fails at once,
    since room only shrinks between rollbacks; scans stop where usage room runs out, and pass over
    whole blocks of nodes without the CPU, memory or pod room the pod requests (``RoomIndex``). A
    search that finds nothing scans every node with usage room once more to say why. ``block``: keys
    per index block (tests use tiny ones, so that a small cluster has many blocks).
    """

    def __init__(
        self, snapshot: ClusterSnapshot, caps_m: Mapping[str, int], *, pack: bool = False, block: int = BLOCK
    ) -> None:
        self._nodes: dict[str, Node] = {}
        self._room: dict[str, Room] = {}
        self._pack = pack
        self._journal: list[tuple[str, int, int, int]] = []
        self._allowed: dict[Signature, tuple[frozenset[str], str]] = {}
        self._failed: dict[Memo, list[Need]] = {}
        for name, cap in caps_m.items():
            node = snapshot.marks_ahead.get(name) or snapshot.nodes[name]  # with the landing guard's mark ahead
            load = snapshot.load[name]
            if load.usage_m is None:
                continue  # unknown usage: never a destination
            room = Room(
                usage_m=cap - load.usage_m,
                cpu_m=node.allocatable_cpu_m - load.requested_cpu_m,
                memory=node.allocatable_memory - load.requested_memory,
                pods=node.allocatable_pods - load.pod_count,
            )
            self._nodes[name] = node
            self._room[name] = room
        self._index = RoomIndex(self._room, block)

    def __len__(self) -> int:
        return len(self._room)

    def __contains__(self, node: object) -> bool:
        """``node`` is one of the destinations tracked."""
        return node in self._room

    def find(self, pod: Pod, usage_m: int, exclude: Iterable[str] = ()) -> Placement:
        sig = signature(pod)
        allowed, why_not = self._allowed_for(pod, sig)
        if not allowed:
            return Placement(None, f"no destination accepts it ({why_not})")
        excluded = allowed.intersection(exclude)
        memo = (sig, frozenset(excluded))
        need = (usage_m, pod.cpu_request_m, pod.memory_request)
        if self._remembers(memo, need):
            return Placement(None, REMEMBERED)
        for room_m, name in self._scan(usage_m, (pod.cpu_request_m, pod.memory_request, 1)):
            if name in excluded or name not in allowed:
                continue
            if self._request_blocker(pod, name) is None:
                return Placement(name, f"{name} has {cores_text(room_m)} of real-usage room")
        self._failed.setdefault(memo, []).append(need)
        return self._none_for(pod, usage_m, allowed, excluded)

    def _remembers(self, memo: Memo, need: Need) -> bool:
        """A pod needing at least as much as one that found no room (same constraints) fails at once."""
        for failed in self._failed.get(memo, ()):
            if need[0] >= failed[0] and need[1] >= failed[1] and need[2] >= failed[2]:
                return True
        return False

    def _none_for(self, pod: Pod, usage_m: int, allowed: frozenset[str], excluded: frozenset[str]) -> Placement:
        """Why no destination takes ``pod``: none has the usage room, or (the most frequent) request
        shortfalls of those that have it."""
        rejected: dict[str, int] = {}
        for _, name in self._scan(usage_m):
            if name in excluded or name not in allowed:
                continue
            why = self._request_blocker(pod, name)
            if why is not None:
                rejected[why] = rejected.get(why, 0) + 1
        if not rejected:
            return Placement(None, f"no destination has {cores_text(usage_m)} of real-usage room left")
        summary = "; ".join(f"{n} node(s): {why}" for why, n in sorted(rejected.items(), key=lambda kv: -kv[1])[:3])
        return Placement(None, f"no destination with room accepts it ({summary})")

    def _scan(self, usage_m: int, least: Requests | None = None) -> Iterator[Key]:
        """Destinations with at least ``usage_m`` of usage room in search order, passing over blocks of
        nodes that lack the ``least`` request room (None: none passed over)."""
        if self._pack:
            return self._index.ascending_from(usage_m, least)
        return self._index.descending_to(usage_m, least)

    def _allowed_for(self, pod: Pod, sig: Signature) -> tuple[frozenset[str], str]:
        found = self._allowed.get(sig)
        if found is None:
            reasons: dict[str, int] = {}
            names = []
            for name, node in self._nodes.items():
                why = placement_blocker(pod, node)
                if why is None:
                    names.append(name)
                else:
                    reasons[why] = reasons.get(why, 0) + 1
            top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
            summary = "; ".join(f"{n} node(s): {why}" for why, n in top) or "no destination at all"
            found = self._allowed[sig] = (frozenset(names), summary)
        return found

    def _request_blocker(self, pod: Pod, name: str) -> str | None:
        room = self._room[name]
        if pod.cpu_request_m > room.cpu_m:
            return "CPU requests would exceed allocatable"
        if pod.memory_request > room.memory:
            return "memory requests would exceed allocatable"
        if room.pods < 1:
            return "pod capacity full"
        return None

    def commit(self, node: str, pod: Pod, usage_m: int) -> None:
        self._apply(node, usage_m, pod.cpu_request_m, pod.memory_request, 1)
        self._journal.append((node, usage_m, pod.cpu_request_m, pod.memory_request))

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        if len(self._journal) > checkpoint:
            self._failed.clear()  # room grows back: earlier failures may now fit
        while len(self._journal) > checkpoint:
            node, usage_m, cpu_m, memory = self._journal.pop()
            self._apply(node, -usage_m, -cpu_m, -memory, -1)

    def remove(self, node: str) -> None:
        """Stop offering ``node`` as a destination (for example because it is being emptied)."""
        room = self._room.get(node)
        if room is not None:
            self._index.discard((room.usage_m, node))
            del self._room[node]
            del self._nodes[node]
            self._allowed.clear()

    def _apply(self, node: str, usage_m: int, cpu_m: int, memory: int, pods: int) -> None:
        room = self._room[node]
        self._index.discard((room.usage_m, node))
        room.usage_m -= usage_m
        room.cpu_m -= cpu_m
        room.memory -= memory
        room.pods -= pods
        self._index.add((room.usage_m, node))
