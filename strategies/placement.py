"""Room on concrete destination nodes, consumed as a plan is built (local working state only)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rebalancer.model import Node, Pod
from rebalancer.scheduling import placement_blocker
from rebalancer.snapshot import ClusterSnapshot


@dataclass(slots=True)
class _Room:
    usage_m: int  # real CPU usage the node may still take before reaching its cap
    cpu_m: int  # unrequested allocatable CPU
    memory: int
    pods: int


@dataclass(frozen=True, slots=True)
class Placement:
    node: str | None
    reason: str  # why this node, or why none


Signature = tuple[object, ...]


def signature(pod: Pod) -> Signature:
    """What decides, once and for all, which nodes a pod may run on (not how much room they have)."""
    return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_affinity)


class RoomTracker:
    """Destinations ordered by remaining real-usage room.

    ``find`` returns the destination with the most room (``spread``) or the least room that still fits
    (``pack``), checking requests, pod count, taints, selectors and affinity. Searches stay cheap on
    big clusters: the nodes a pod's constraints allow are computed once per constraint signature; a
    pod that needs at least as much as one that already found no room (same signature) fails at once,
    since room only shrinks between rollbacks; scans stop where usage room runs out.
    """

    def __init__(self, snapshot: ClusterSnapshot, caps_m: Mapping[str, int], *, pack: bool = False) -> None:
        self._nodes: dict[str, Node] = {}
        self._room: dict[str, _Room] = {}
        self._order: list[tuple[int, str]] = []  # (usage room, name), ascending
        self._pack = pack
        self._journal: list[tuple[str, int, int, int]] = []
        self._allowed: dict[Signature, tuple[frozenset[str], str]] = {}
        self._failed: dict[tuple[Signature, frozenset[str]], list[tuple[int, int, int]]] = {}
        for name, cap in caps_m.items():
            node = snapshot.nodes[name]
            load = snapshot.load[name]
            if load.usage_m is None:
                continue  # unknown usage: never a destination
            room = _Room(
                usage_m=cap - load.usage_m,
                cpu_m=node.allocatable_cpu_m - load.requested_cpu_m,
                memory=node.allocatable_memory - load.requested_memory,
                pods=node.allocatable_pods - load.pod_count,
            )
            self._nodes[name] = node
            self._room[name] = room
            self._order.append((room.usage_m, name))
        self._order.sort()

    def __len__(self) -> int:
        return len(self._order)

    def find(self, pod: Pod, usage_m: int, exclude: Iterable[str] = ()) -> Placement:
        sig = signature(pod)
        allowed, why_not = self._allowed_for(pod, sig)
        if not allowed:
            return Placement(None, f"no destination accepts it ({why_not})")
        excluded = allowed.intersection(exclude)
        memo = (sig, frozenset(excluded))
        need = (usage_m, pod.cpu_request_m, pod.memory_request)
        for failed in self._failed.get(memo, ()):
            if need[0] >= failed[0] and need[1] >= failed[1] and need[2] >= failed[2]:
                return Placement(None, "no destination with room accepts it (a pod needing no more found none)")
        start = bisect.bisect_left(self._order, (usage_m, ""))
        indices = range(start, len(self._order)) if self._pack else range(len(self._order) - 1, start - 1, -1)
        rejected: dict[str, int] = {}
        for i in indices:
            room_m, name = self._order[i]
            if name in excluded or name not in allowed:
                continue
            why = self._request_blocker(pod, name)
            if why is None:
                return Placement(name, f"{name} has {room_m}m of real-usage room")
            rejected[why] = rejected.get(why, 0) + 1
        self._failed.setdefault(memo, []).append(need)
        if not rejected:
            return Placement(None, f"no destination has {usage_m}m of real-usage room left")
        summary = "; ".join(f"{n} node(s): {why}" for why, n in sorted(rejected.items(), key=lambda kv: -kv[1])[:3])
        return Placement(None, f"no destination with room accepts it ({summary})")

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
        room = self._room.pop(node, None)
        if room is not None:
            self._order.remove((room.usage_m, node))
            del self._nodes[node]
            self._allowed.clear()

    def _apply(self, node: str, usage_m: int, cpu_m: int, memory: int, pods: int) -> None:
        room = self._room[node]
        self._order.pop(bisect.bisect_left(self._order, (room.usage_m, node)))
        room.usage_m -= usage_m
        room.cpu_m -= cpu_m
        room.memory -= memory
        room.pods -= pods
        bisect.insort(self._order, (room.usage_m, node))
