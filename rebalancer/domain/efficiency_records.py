"""What the efficiency metrics remember across runs and instances, and its strict JSON form.

The records live in the cluster (a ConfigMap written with optimistic concurrency, like the limiter
state), so the rates survive restarts and CronJob runs. Decoding is strict: anything that is not exactly
this schema and version raises :class:`RecordsCorrupt` naming the problem; the caller reports it and
starts afresh (the records only measure, they never allow an eviction). :data:`EFFICIENCY_RECORDS` is
their kind for the document store (:mod:`rebalancer.domain.documents`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import msgspec

from rebalancer.domain.documents import DocumentKind
from rebalancer.domain.errors import DocumentCorrupt
from rebalancer.domain.versioned_json import decode_versioned

SCHEMA = "rebalancer.io/efficiency-records"
VERSION = 1
MAX_FUTURE_SECONDS = 3600.0

COOLED = "cooled"
LANDED_BACK = "landed-back"  # a pod of an evicted workload was scheduled back onto the node
NEW_PODS = "new-pods"  # pods scheduled onto the node since brought the load back
OTHERS_GREW = "others-grew"  # the pods that stayed grew
TOO_LITTLE_MOVED = "too-little-moved"  # nothing came or grew: the evictions did not take enough off
UNKNOWN = "unknown"  # the node's usage was unknown when the window closed: not judged (never read as 0)
NODE_GONE = "node-gone"  # the node left the cluster before it could be judged
CPU = "cpu"
OTHER_RESOURCES = ("memory", "pods")
NOT_COOLED = (LANDED_BACK, NEW_PODS, OTHERS_GREW, TOO_LITTLE_MOVED)
UNJUDGED = (UNKNOWN, NODE_GONE)


class RecordsCorrupt(DocumentCorrupt):
    what = "efficiency records"


class _Struct(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    pass


class Sighting(_Struct, frozen=True):
    """One hot episode of a node: cycles that found it hot, none more than ``episodeGap`` apart."""

    node: str
    pool: str
    first: float
    last: float
    cycles: int
    acted: bool  # at least one pod was evicted from it during the episode
    reasons: Mapping[str, int] = msgspec.field(default_factory=dict)  # why not acted -> cycles


class EvictedPod(_Struct, frozen=True):
    namespace: str
    name: str
    workload: str | None  # "Kind/namespace/name"
    usage_m: int
    created: float = 0.0  # the pod's creation time (bounce-backs: was it itself a replacement?)
    predicted: str | None = None  # where placement prediction expected the replacement (None: no prediction)
    landed: str | None = None  # where the replacement was seen scheduled (None: not seen yet, or never)
    replacement: str | None = None  # the pod taken for the replacement ("namespace/name"), claimed once
    # working set at eviction (bytes, -1 unknown); None: memory not read (or recorded before it was kept)
    memory: int | None = None


class ResourceAtRelief(_Struct, frozen=True):
    """A resource beside CPU (memory, pods) the strategy's thresholds name, as it was when its node was relieved."""

    resource: str
    pct: float | None  # None: unknown
    target_pct: float

    @property
    def over(self) -> bool:
        return self.pct is not None and self.pct > self.target_pct


class Relief(_Struct, frozen=True):
    """The pods evicted from one hot node in one cycle, and what became of the node.

    It is judged on every resource that was over its target when the node was relieved (:attr:`judged_on`):
    CPU (``usage_pct`` and ``target_pct``) and those of ``others``; records written before memory and pods
    were recorded have no ``others`` and are judged on CPU as they always were."""

    node: str
    pool: str
    strategy: str
    at: float
    target_pct: float
    usage_pct: float  # as planned on (the strategy's usage: current or predicted)
    evicted: tuple[EvictedPod, ...]
    deadline: float
    remaining: Mapping[str, int] | None = None  # uid -> usage (m, -1 unknown) of the pods that stayed; None once judged
    result: str | None = None  # None: pending; COOLED, a NOT_COOLED reason, or UNJUDGED
    judged_at: float | None = None
    usage_pct_after: float | None = None
    detail: str = ""
    measured_m: int | None = None  # the node's measured usage when relieved (None: unknown or not recorded)
    cold_pct: float | None = None  # the strategy's cold threshold for the node (None: it has none)
    repeat: bool = False  # the node was relieved again while an earlier relief of it was pending
    others: tuple[ResourceAtRelief, ...] = ()  # memory, pods: when the strategy's thresholds name them
    # uid -> working set (bytes, -1 unknown) of the pods that stayed, when memory was over target; None once judged
    remaining_memory: Mapping[str, int] | None = None
    measured_memory: int | None = None  # the node's measured working set when relieved (None: unknown or not read)

    @property
    def judged_on(self) -> tuple[tuple[str, float], ...]:
        """(resource, target percentage) of each resource that must fall under its target for the node to count
        as cooled: those over target when relieved; CPU alone when none of the others was (a node no
        strategy called hot, or hot by CPU alone)."""
        over = [(o.resource, o.target_pct) for o in self.others if o.over]
        if not over or self.usage_pct > self.target_pct:
            over.insert(0, (CPU, self.target_pct))
        return tuple(over)

    @property
    def below_cold(self) -> bool:
        """It cooled the node below its cold threshold: more was moved than was needed."""
        return (
            self.result == COOLED
            and self.cold_pct is not None
            and self.usage_pct_after is not None
            and self.usage_pct_after < self.cold_pct
        )

    @property
    def overshoot(self) -> bool:
        """Beyond need: below the cold threshold, or a relief of a node whose earlier relief was pending."""
        return self.repeat or self.below_cold


class BounceBack(_Struct, frozen=True):
    """An eviction of a pod that had itself just moved: created after its workload's earlier eviction."""

    at: float
    workload: str
    node: str
    pool: str
    previous_node: str
    previous_at: float


class CycleSummary(_Struct, frozen=True):
    at: float
    trigger: str
    found: Mapping[str, int] = msgspec.field(default_factory=dict)  # pool -> hot nodes found
    evicted: Mapping[str, int] = msgspec.field(default_factory=dict)  # pool -> pods evicted
    blocked: Mapping[str, int] = msgspec.field(default_factory=dict)  # limiter -> evictions blocked
    # bounce-backs avoided: pool -> candidates passed over because placement prediction sent their
    # replacement back onto their node, or because they had just moved there (the bounce-back memory)
    lands_back: Mapping[str, int] = msgspec.field(default_factory=dict)
    recently_moved: Mapping[str, int] = msgspec.field(default_factory=dict)


class EfficiencyState(_Struct, frozen=True):
    """Never mutated: the ledger functions return a new state."""

    sightings: tuple[Sighting, ...] = ()
    reliefs: tuple[Relief, ...] = ()
    bounce_backs: tuple[BounceBack, ...] = ()
    cycles: tuple[CycleSummary, ...] = ()

    def prune(self, now: float, horizon: float, max_records: int) -> EfficiencyState:
        """Drop what no period reaches any more, then the oldest beyond ``max_records`` of each kind
        (pending reliefs are kept while their follow-up may still be judged)."""
        cutoff = now - horizon
        reliefs = [r for r in self.reliefs if r.at > cutoff or (r.result is None and r.deadline > cutoff)]
        pending = [r for r in reliefs if r.result is None]
        judged = [r for r in reliefs if r.result is not None]
        room = max(0, max_records - len(pending))
        judged = judged[len(judged) - room :] if room else []
        return EfficiencyState(
            sightings=tuple(s for s in self.sightings if s.last > cutoff)[-max_records:],
            reliefs=tuple(sorted(judged + pending, key=lambda r: (r.at, r.node))),
            bounce_backs=tuple(b for b in self.bounce_backs if b.at > cutoff)[-max_records:],
            cycles=tuple(c for c in self.cycles if c.at > cutoff)[-max_records:],
        )

    def to_json(self) -> str:
        doc = _Document(SCHEMA, VERSION, self.sightings, self.reliefs, self.bounce_backs, self.cycles)
        return msgspec.json.encode(doc, order="deterministic").decode()

    @classmethod
    def from_json(cls, text: str | bytes, now: float) -> EfficiencyState:
        doc = decode_versioned(text, _Document, SCHEMA, VERSION, RecordsCorrupt, "efficiency records")
        _check(doc, now)
        return cls(doc.sightings, doc.reliefs, doc.bounce_backs, doc.cycles)


class _Document(_Struct, frozen=True):
    schema: str
    version: int
    sightings: tuple[Sighting, ...]
    reliefs: tuple[Relief, ...]
    bounce_backs: tuple[BounceBack, ...]
    cycles: tuple[CycleSummary, ...]


EFFICIENCY_RECORDS = DocumentKind(
    "efficiency records", EfficiencyState, EfficiencyState.from_json, EfficiencyState.to_json
)


_RESULTS = frozenset({COOLED, *NOT_COOLED, *UNJUDGED})


def _check(doc: _Document, now: float) -> None:
    def time(value: float, where: str) -> None:
        if not math.isfinite(value) or value < 0:
            raise RecordsCorrupt(f"{where}: {value!r} is not a time")
        if value > now + MAX_FUTURE_SECONDS:
            raise RecordsCorrupt(f"{where}: {value} is {value - now:.0f} s after now (clock broken or corrupt)")

    for i, s in enumerate(doc.sightings):
        where = f"$.sightings[{i}]"
        time(s.first, f"{where}.first")
        time(s.last, f"{where}.last")
        if s.last < s.first or s.cycles < 1 or not s.node:
            raise RecordsCorrupt(f"{where}: needs a node, first <= last and cycles >= 1")
    for i, r in enumerate(doc.reliefs):
        where = f"$.reliefs[{i}]"
        time(r.at, f"{where}.at")
        if r.deadline < r.at or not r.node or not r.evicted:
            raise RecordsCorrupt(f"{where}: needs a node, evicted pods and deadline >= at")
        if r.result is not None and r.result not in _RESULTS:
            raise RecordsCorrupt(f"{where}.result: {r.result!r} is not one of {sorted(_RESULTS)}")
        if not (math.isfinite(r.target_pct) and math.isfinite(r.usage_pct)):
            raise RecordsCorrupt(f"{where}: targetPct and usagePct must be numbers")
        for j, other in enumerate(r.others):
            _check_other(other, f"{where}.others[{j}]")
        for j, pod in enumerate(r.evicted):
            if pod.memory is not None and pod.memory < -1:
                raise RecordsCorrupt(f"{where}.evicted[{j}].memory: {pod.memory} is not bytes (-1: unknown)")
    for i, b in enumerate(doc.bounce_backs):
        time(b.at, f"$.bounceBacks[{i}].at")
    for i, c in enumerate(doc.cycles):
        time(c.at, f"$.cycles[{i}].at")


def _check_other(other: ResourceAtRelief, where: str) -> None:
    if other.resource not in OTHER_RESOURCES:
        raise RecordsCorrupt(f"{where}.resource: {other.resource!r} is not one of {list(OTHER_RESOURCES)}")
    if not math.isfinite(other.target_pct) or (other.pct is not None and not math.isfinite(other.pct)):
        raise RecordsCorrupt(f"{where}: targetPct and pct must be numbers")
