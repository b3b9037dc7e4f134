"""Converted pods sent from a page worker to the listing process as rows over shared tables.

Sending each ``Pod`` whole (MessagePack of the structs) made the listing process rebuild every string,
toleration, workload and volume set of every pod: as costly as converting the page itself, and twice
the memory. Here the values pods share (namespace, node, phase, QoS, workload, tolerations, volume
kinds, node selector, required affinity) are sent once per list, in tables that grow page by page,
and each pod is a row of indices into them plus its own values (name, uid, labels, ...). The listing
process builds each ``Pod`` by position from a row, with the shared values shared, as the in-process
conversion does. MessagePack decoding checks every row against its declared types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from sys import intern
from types import MappingProxyType
from typing import Any

import msgspec

from rebalancer.labels import NodeSelectorTerm
from rebalancer.model import Pod, Toleration, WorkloadRef

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NONE = -1  # the index of an absent value (a bare pod's workload, an unbound pod's node)

Row = tuple[
    int,  # namespace (strings)
    str,  # name
    str,  # uid
    int,  # node_name (strings, or _NONE)
    int,  # phase (strings)
    bool,  # ready
    int,  # workload (workloads, or _NONE)
    int,  # owner_kind (strings, or _NONE)
    int,  # priority
    int,  # priority_class (strings)
    int,  # qos (strings)
    int,  # cpu_request_m
    int,  # memory_request
    float,  # created
    int,  # restarts
    dict[str, str],  # labels
    dict[str, str],  # annotations (the kept ones)
    int,  # volume_kinds (volume_kinds)
    int,  # tolerations (tolerations)
    int,  # node_selector (selectors)
    int,  # required_affinity (affinities)
    bool,  # terminating
    bool,  # mirror
]


class Tables(msgspec.Struct, array_like=True, gc=False):
    """Values first seen on this page, appended to the list's tables in this order."""

    strings: list[str] = []
    workloads: list[WorkloadRef] = []
    tolerations: list[tuple[Toleration, ...]] = []
    volume_kinds: list[frozenset[str]] = []
    selectors: list[dict[str, str]] = []
    affinities: list[tuple[NodeSelectorTerm, ...]] = []


class PodRows(msgspec.Struct, array_like=True, gc=False):
    """A page's pods, or the error that stopped its conversion (``rows`` then empty)."""

    tables: Tables = msgspec.field(default_factory=Tables)
    rows: list[Row] = []
    error: str | None = None
    status: int | None = None
    reason: str | None = None


class RowWriter:
    """The worker's side, for one list: pods -> rows, tables indexed by value."""

    def __init__(self) -> None:
        self._strings: dict[str, int] = {}
        self._workloads: dict[WorkloadRef, int] = {}
        self._tolerations: dict[tuple[Toleration, ...], int] = {}
        self._volume_kinds: dict[frozenset[str], int] = {}
        self._selectors: dict[tuple[tuple[str, str], ...], int] = {}
        self._affinities: dict[tuple[NodeSelectorTerm, ...], int] = {}

    def page(self, pods: Sequence[Pod]) -> PodRows:
        new = Tables([], [], [], [], [], [])
        strings, text = self._strings, new.strings

        def s(value: str) -> int:
            found = strings.get(value)
            if found is None:
                found = strings[value] = len(strings)
                text.append(value)
            return found

        def ref(table: dict[Any, int], key: Any, value: Any, out: list[Any]) -> int:
            found = table.get(key)
            if found is None:
                found = table[key] = len(table)
                out.append(value)
            return found

        rows: list[Row] = []
        for p in pods:
            node, workload, owner = p.node_name, p.workload, p.owner_kind
            selector = tuple(p.node_selector.items())
            rows.append(
                (
                    s(p.namespace),
                    p.name,
                    p.uid,
                    _NONE if node is None else s(node),
                    s(p.phase),
                    p.ready,
                    _NONE if workload is None else ref(self._workloads, workload, workload, new.workloads),
                    _NONE if owner is None else s(owner),
                    p.priority,
                    s(p.priority_class),
                    s(p.qos),
                    p.cpu_request_m,
                    p.memory_request,
                    p.created,
                    p.restarts,
                    dict(p.labels),
                    dict(p.annotations),
                    ref(self._volume_kinds, p.volume_kinds, p.volume_kinds, new.volume_kinds),
                    ref(self._tolerations, p.tolerations, p.tolerations, new.tolerations),
                    ref(self._selectors, selector, dict(selector), new.selectors),
                    ref(self._affinities, p.required_affinity, p.required_affinity, new.affinities),
                    p.terminating,
                    p.mirror,
                )
            )
        return PodRows(new, rows)


class RowReader:
    """The listing process's side, for one list: rows -> ``Pod`` structs sharing the tables' values."""

    def __init__(self) -> None:
        self._strings: list[str] = []
        self._workloads: list[WorkloadRef] = []
        self._tolerations: list[tuple[Toleration, ...]] = []
        self._volume_kinds: list[frozenset[str]] = []
        self._selectors: list[Mapping[str, str]] = []
        self._affinities: list[tuple[NodeSelectorTerm, ...]] = []

    def page(self, page: PodRows) -> list[Pod]:
        new = page.tables
        self._strings += map(intern, new.strings)  # shared with the pods converted in this process too
        self._workloads += new.workloads
        self._tolerations += new.tolerations
        self._volume_kinds += new.volume_kinds
        self._selectors += (MappingProxyType(s) if s else _EMPTY for s in new.selectors)
        self._affinities += new.affinities
        s, w = self._strings, self._workloads
        vk, tol, sel, aff = self._volume_kinds, self._tolerations, self._selectors, self._affinities
        try:
            return [
                Pod(
                    s[r[0]],
                    r[1],
                    r[2],
                    None if r[3] < 0 else s[r[3]],
                    s[r[4]],
                    r[5],
                    None if r[6] < 0 else w[r[6]],
                    None if r[7] < 0 else s[r[7]],
                    r[8],
                    s[r[9]],
                    s[r[10]],
                    r[11],
                    r[12],
                    r[13],
                    r[14],
                    r[15] or _EMPTY,
                    r[16] or _EMPTY,
                    vk[r[17]],
                    tol[r[18]],
                    sel[r[19]],
                    aff[r[20]],
                    r[21],
                    r[22],
                )
                for r in page.rows
            ]
        except IndexError as exc:  # never expected: this module's own worker wrote the rows
            raise ValueError(f"a pod row refers to a table entry that was never sent: {exc}") from exc
