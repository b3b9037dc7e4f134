"""The watch cache's pods grouped by node and by workload, kept current event by event.

A cycle on 150,000 cached pods would otherwise regroup every pod and sum every request again (about
100-200 ms on two cores), and the evictor would scan every pod for the replicas of the workloads it
evicts from (about 30 ms), although a few pods changed since the last cycle. :class:`PodGroups` follows
the pod map's changes (the informer calls it under its own lock) and rebuilds only the groups whose
pods changed: a cycle takes the groups as they are (:meth:`PodGroups.view`).

Only non-terminal pods are grouped. The groups are what :func:`rebalancer.planning.snapshot.group_pods` makes of
the map's pods in the map's order: each pod keeps the position it got when its key entered the map (a
dict keeps a replaced key's place), so the pods of a group are ordered by that arrival number, as a
regrouping of the map would order them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from rebalancer.domain.model import TERMINAL_PHASES, NodePods, Pod, WorkloadRef
from rebalancer.planning.snapshot import node_pods

_G = TypeVar("_G", bound=Hashable)
_V = TypeVar("_V")


class _Grouping(Generic[_G, _V]):
    """Members by group, and each group built once until one of its members changes."""

    def __init__(self, build: Callable[[list[Pod]], _V]) -> None:
        self._build = build
        self.members: dict[_G, dict[Hashable, Pod]] = {}
        self._built: dict[_G, _V] = {}
        self._dirty: set[_G] = set()

    def clear(self) -> None:
        self.members, self._built, self._dirty = {}, {}, set()

    def add(self, group: _G, key: Hashable, pod: Pod) -> None:
        self.members.setdefault(group, {})[key] = pod
        self._dirty.add(group)

    def remove(self, group: _G, key: Hashable) -> None:
        members = self.members.get(group)
        if members is not None and members.pop(key, None) is not None:
            self._dirty.add(group)

    def view(self, arrival: Mapping[Hashable, int]) -> dict[_G, _V]:
        for group in self._dirty:
            members = self.members.get(group)
            if not members:
                self.members.pop(group, None)
                self._built.pop(group, None)
                continue
            ordered = sorted(members.items(), key=lambda item: arrival[item[0]])
            self._built[group] = self._build([pod for _, pod in ordered])
        self._dirty.clear()
        return dict(self._built)


class PodGroups:
    """Not thread-safe by itself: the owning informer calls every method under its lock."""

    def __init__(self) -> None:
        self._arrival: dict[Hashable, int] = {}  # key -> its place in the pod map's order
        self._next = 0
        self._by_node: _Grouping[str, NodePods] = _Grouping(node_pods)  # node ("" for none)
        self._by_workload: _Grouping[WorkloadRef, tuple[Pod, ...]] = _Grouping(tuple)

    def reset(self, items: Mapping[Hashable, Pod]) -> None:
        """The map was replaced whole (a listing)."""
        self._arrival = {key: i for i, key in enumerate(items)}
        self._next = len(self._arrival)
        self._by_node.clear()
        self._by_workload.clear()
        for key, pod in items.items():
            self._add(key, pod)

    def change(self, key: Hashable, old: Pod | None, new: Pod | None) -> None:
        """``key`` went from ``old`` to ``new`` in the map (None: absent)."""
        if new is None:
            self._arrival.pop(key, None)
        elif key not in self._arrival:
            self._arrival[key] = self._next
            self._next += 1
        if old is not None and old.phase not in TERMINAL_PHASES:
            self._by_node.remove(old.node_name or "", key)
            if old.workload is not None:
                self._by_workload.remove(old.workload, key)
        if new is not None:
            self._add(key, new)

    def _add(self, key: Hashable, pod: Pod) -> None:
        if pod.phase not in TERMINAL_PHASES:
            self._by_node.add(pod.node_name or "", key, pod)
            if pod.workload is not None:
                self._by_workload.add(pod.workload, key, pod)

    def view(self) -> tuple[dict[str, NodePods], dict[WorkloadRef, tuple[Pod, ...]]]:
        """The groups now, by node and by workload (new dicts; the groups themselves are immutable)."""
        return self._by_node.view(self._arrival), self._by_workload.view(self._arrival)
