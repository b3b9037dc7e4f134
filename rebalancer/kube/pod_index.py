"""The watch cache's pods grouped by node, kept current event by event.

A cycle on 150,000 cached pods would otherwise regroup every pod and sum every request again (about
100-200 ms on two cores) although a few pods changed since the last cycle. :class:`PodsByNode` follows
the pod map's changes (the informer calls it under its own lock) and rebuilds only the groups of nodes
whose pods changed: a cycle takes the groups as they are (:meth:`PodsByNode.view`).

The groups are what :func:`rebalancer.snapshot.group_pods` makes of the map's pods in the map's order:
each pod keeps the position it got when its key entered the map (a dict keeps a replaced key's place),
so the pods of a group are ordered by that arrival number, as a regrouping of the map would order them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from rebalancer.model import NodePods, Pod
from rebalancer.snapshot import TERMINAL_PHASES, node_pods


class PodsByNode:
    """Not thread-safe by itself: the owning informer calls every method under its lock."""

    def __init__(self) -> None:
        self._arrival: dict[Hashable, int] = {}  # key -> its place in the pod map's order
        self._next = 0
        self._members: dict[str, dict[Hashable, Pod]] = {}  # node ("" for none) -> its non-terminal pods
        self._groups: dict[str, NodePods] = {}  # built groups, valid for the nodes not in _dirty
        self._dirty: set[str] = set()

    def reset(self, items: Mapping[Hashable, Pod]) -> None:
        """The map was replaced whole (a listing)."""
        self._arrival = {key: i for i, key in enumerate(items)}
        self._next = len(self._arrival)
        self._members = {}
        for key, pod in items.items():
            if pod.phase not in TERMINAL_PHASES:
                self._members.setdefault(pod.node_name or "", {})[key] = pod
        self._groups = {}
        self._dirty = set(self._members)

    def change(self, key: Hashable, old: Pod | None, new: Pod | None) -> None:
        """``key`` went from ``old`` to ``new`` in the map (None: absent)."""
        if new is None:
            self._arrival.pop(key, None)
        elif key not in self._arrival:
            self._arrival[key] = self._next
            self._next += 1
        if old is not None and old.phase not in TERMINAL_PHASES:
            node = old.node_name or ""
            members = self._members.get(node)
            if members is not None and members.pop(key, None) is not None:
                self._dirty.add(node)
        if new is not None and new.phase not in TERMINAL_PHASES:
            node = new.node_name or ""
            self._members.setdefault(node, {})[key] = new
            self._dirty.add(node)

    def view(self) -> dict[str, NodePods]:
        """The groups now (a new dict; the groups themselves are immutable and shared)."""
        arrival = self._arrival
        for node in self._dirty:
            members = self._members.get(node)
            if not members:
                self._members.pop(node, None)
                self._groups.pop(node, None)
                continue
            ordered = sorted(members.items(), key=lambda item: arrival[item[0]])
            self._groups[node] = node_pods(pod for _, pod in ordered)
        self._dirty.clear()
        return dict(self._groups)
