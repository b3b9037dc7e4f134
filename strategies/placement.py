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


class RoomTracker:
    """Destinations ordered by remaining real-usage room.

    ``find`` returns the destination with the most room (``spread``) or the least room that still fits
    (``pack``), checking requests, pod count, taints, selectors and affinity. Scans stop as soon as the
    remaining room is below the pod's usage, so a search costs O(log n) plus the nodes it rejects.
    """

    def __init__(self, snapshot: ClusterSnapshot, caps_m: Mapping[str, int], *, pack: bool = False) -> None:
        self._nodes: dict[str, Node] = {}
        self._room: dict[str, _Room] = {}
        self._order: list[tuple[int, str]] = []  # (usage room, name), ascending
        self._pack = pack
        self._journal: list[tuple[str, int, int, int]] = []
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
        excluded = set(exclude)
        start = bisect.bisect_left(self._order, (usage_m, ""))
        indices = range(start, len(self._order)) if self._pack else range(len(self._order) - 1, start - 1, -1)
        rejected: dict[str, int] = {}
        for i in indices:
            room_m, name = self._order[i]
            if name in excluded:
                continue
            why = self._blocker(pod, name)
            if why is None:
                return Placement(name, f"{name} has {room_m}m of real-usage room")
            rejected[why] = rejected.get(why, 0) + 1
        if start == len(self._order):
            return Placement(None, f"no destination has {usage_m}m of real-usage room left")
        summary = "; ".join(f"{n} node(s): {why}" for why, n in sorted(rejected.items(), key=lambda kv: -kv[1])[:3])
        return Placement(None, f"no destination with room accepts it ({summary})")

    def _blocker(self, pod: Pod, name: str) -> str | None:
        room = self._room[name]
        if pod.cpu_request_m > room.cpu_m:
            return "CPU requests would exceed allocatable"
        if pod.memory_request > room.memory:
            return "memory requests would exceed allocatable"
        if room.pods < 1:
            return "pod capacity full"
        return placement_blocker(pod, self._nodes[name])

    def commit(self, node: str, pod: Pod, usage_m: int) -> None:
        self._apply(node, usage_m, pod.cpu_request_m, pod.memory_request, 1)
        self._journal.append((node, usage_m, pod.cpu_request_m, pod.memory_request))

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        while len(self._journal) > checkpoint:
            node, usage_m, cpu_m, memory = self._journal.pop()
            self._apply(node, -usage_m, -cpu_m, -memory, -1)

    def remove(self, node: str) -> None:
        """Stop offering ``node`` as a destination (for example because it is being emptied)."""
        room = self._room.pop(node, None)
        if room is not None:
            self._order.remove((room.usage_m, node))
            del self._nodes[node]

    def _apply(self, node: str, usage_m: int, cpu_m: int, memory: int, pods: int) -> None:
        room = self._room[node]
        self._order.pop(bisect.bisect_left(self._order, (room.usage_m, node)))
        room.usage_m -= usage_m
        room.cpu_m -= cpu_m
        room.memory -= memory
        room.pods -= pods
        bisect.insort(self._order, (room.usage_m, node))
