"""Predicted next-peak load in the snapshot, and what a predictive strategy may classify by (pure).

LowNodeUtilization's ``classifyBy`` chooses what "usage" means for its classification, pod choice and
room search: ``current`` (the window statistic read now), ``predicted`` (the predictor's next peak), or
``max`` (the higher of the two, per node and per pod). Unknown stays unknown: a node (or pod) whose
prediction is unknown is unknown in ``predicted`` and ``max`` mode, never hot, cold or movable.

With the pods' daily profiles at hand (``book``, ``nodePeak: coincident``) a node's predicted load is its
coincident peak, and a planned move re-predicts the two nodes it touches from the profiles of the pods they
then hold (:meth:`PredictedLoad.moved`, :meth:`PredictedLoad.peak_after`): a pod that does not peak with its
node relieves less than its own peak. A pod moved lands as a new pod the predictor has no history of: its
workload's pods with history give its level (:class:`Successors`), so the node it lands on is judged with
what the next prediction will say of it, not with the evicted pod's own profile. ``peak_caps`` are the
predicted peaks no planned move may take a node above (set by a strategy that relieves nodes before their
peak, read by every later one).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, time, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from rebalancer.domain.model import PodKey

if TYPE_CHECKING:
    from rebalancer.planning.predict.node_peak import PeakBook
    from rebalancer.planning.predict.predictor import Prediction

ClassifyBy = Literal["current", "predicted", "max"]
PREDICTIVE: frozenset[str] = frozenset({"predicted", "max"})
"""The classifyBy values that need the predictor's next peak."""
DAY_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class Successors:
    """What the predictor will say of an evicted pod's replacement, a new pod without history: the quantile
    ``quantile`` of the predicted peaks of its workload's pods with history still there (``levels``)."""

    workload_of: Mapping[PodKey, str]
    levels: Mapping[str, Mapping[PodKey, float]]  # workload -> its pods with history -> their predicted peak
    quantile: float

    @classmethod
    def of(cls, prediction: Prediction, quantile: float) -> Successors:
        workload_of: dict[PodKey, str] = {}
        levels: dict[str, dict[PodKey, float]] = {}
        for p in prediction.pods:
            if p.workload is None:
                continue
            workload_of[p.key] = p.workload
            if p.source == "history" and p.cpu_m is not None:
                levels.setdefault(p.workload, {})[p.key] = p.cpu_m
        return cls(MappingProxyType(workload_of), MappingProxyType(levels), quantile)

    def level(self, pod: PodKey, gone: Collection[PodKey]) -> float | None:
        """The replacement's predicted peak; None when no other pod of its workload has history (it would be
        predicted from its request alone)."""
        workload = self.workload_of.get(pod)
        siblings = self.levels.get(workload, {}) if workload is not None else {}
        values = [v for k, v in siblings.items() if k != pod and k not in gone]
        return float(np.quantile(values, self.quantile)) if values else None


@dataclass(frozen=True, slots=True)
class PredictedLoad:
    """Per node and per pod, the predicted next-peak CPU in millicores (absent: unknown)."""

    node_cpu_m: Mapping[str, int] = field(default_factory=dict)
    node_unknown: Mapping[str, str] = field(default_factory=dict)  # node -> why its prediction is unknown
    pod_cpu_m: Mapping[PodKey, int] = field(default_factory=dict)
    failure: str | None = None  # the prediction could not be made: predictive strategies evict nothing
    description: str = ""
    book: PeakBook | None = None  # the pods' profiles on the nodes the prediction saw (never changed)
    moves: Mapping[PodKey, str | None] = field(default_factory=dict)  # planned this cycle: pod -> destination
    peak_caps: Mapping[str, int] = field(default_factory=dict)  # node -> highest predicted peak a move may leave
    successors: Successors | None = None  # with ``book``: how the replacements of moved pods are predicted

    @classmethod
    def failed(cls, reason: str) -> PredictedLoad:
        return cls(failure=reason)

    @classmethod
    def from_prediction(cls, prediction: Prediction, description: str, book: PeakBook | None = None) -> PredictedLoad:
        nodes: dict[str, int] = {}
        unknown: dict[str, str] = {}
        for n in prediction.nodes:
            if n.cpu_m is not None and n.allocatable_cpu_m > 0:
                nodes[n.node] = round(n.cpu_m)
            elif n.unknown_pods:
                shown = ", ".join(f"{ns}/{name}" for ns, name in n.unknown_pods[:3])
                more = f" and {len(n.unknown_pods) - 3} more" if len(n.unknown_pods) > 3 else ""
                unknown[n.node] = f"prediction unknown: no history, sibling or request for {shown}{more}"
            else:
                unknown[n.node] = "prediction unknown: the node reports no allocatable CPU"
        pods = {p.key: round(p.cpu_m) for p in prediction.pods if p.cpu_m is not None}
        successors = Successors.of(prediction, book.settings.sibling_quantile) if book is not None else None
        return cls(
            MappingProxyType(nodes),
            MappingProxyType(unknown),
            MappingProxyType(pods),
            None,
            description,
            book,
            successors=successors,
        )

    def coincident(self, pod: PodKey) -> bool:
        """The pod's node is predicted by its coincident peak, which moves re-predict."""
        return self.book is not None and self.book.node_of(pod) is not None

    def peak_after(self, node: str, add: tuple[PodKey, ...] = (), remove: tuple[PodKey, ...] = ()) -> int | None:
        """The node's coincident peak with this cycle's planned moves, ``add`` on it and ``remove`` off it
        (None: no profiles, or a pod on it is unknown). A pod landing on it counts as its replacement will be
        predicted (:meth:`successor_profile`; its own profile when there is no such prediction)."""
        if self.book is None:
            return None
        found = self.book.peak_with(node, *self._changes(self.book, node, add, remove))
        return None if found is None else round(found[0])

    def profile_after(
        self, node: str, add: tuple[PodKey, ...] = (), remove: tuple[PodKey, ...] = ()
    ) -> npt.NDArray[np.float64] | None:
        """The node's summed (days, buckets) profile, its system usage included, with the changes
        :meth:`peak_after` takes (None: no profiles, or a pod on it is unknown)."""
        if self.book is None:
            return None
        total = self.book.total_with(node, *self._changes(self.book, node, add, remove))
        return None if total is None else total + self.book.system_cpu_m(node)

    def _changes(
        self, book: PeakBook, node: str, add: tuple[PodKey, ...], remove: tuple[PodKey, ...]
    ) -> tuple[list[PodKey], list[PodKey], npt.NDArray[np.float64] | None]:
        """What :meth:`PeakBook.peak_with` adds to and removes from ``node`` for this cycle's planned moves,
        ``add`` and ``remove``: the pods counted with their own profile, those gone, the arriving replacements'
        summed profile."""
        here = [k for k, to in self.moves.items() if to == node and book.node_of(k) != node]
        gone = [k for k, to in self.moves.items() if to != node and book.node_of(k) == node]
        own, plus = self._arriving([*here, *add])
        return own, [*gone, *remove], plus

    def successor_profile(self, pod: PodKey) -> npt.NDArray[np.float64] | None:
        """The (days, buckets) profile the next prediction gives the pod's replacement: its own daily shape
        at the level of its workload's other pods with history (never below its own); None without profile
        or without such pods."""
        own = self.book.profile(pod) if self.book is not None else None
        level = self.successors.level(pod, self.moves) if self.successors is not None else None
        if own is None or level is None:
            return None
        top = float(own.max())
        if top <= 0:
            return np.full(own.shape, level, dtype=np.float64)
        return np.asarray(own, dtype=np.float64) * (max(level, top) / top)

    def _arriving(self, keys: Iterable[PodKey]) -> tuple[list[PodKey], npt.NDArray[np.float64] | None]:
        """The pods counted with their own profile, and the summed profile of the others' replacements."""
        own: list[PodKey] = []
        plus: npt.NDArray[np.float64] | None = None
        for key in keys:
            profile = self.successor_profile(key)
            if profile is None:
                own.append(key)
            else:
                plus = profile if plus is None else plus + profile
        return own, plus

    def bucket_at(self, at: float) -> int | None:
        """The profiles' time-of-day bucket ``at`` falls in, in the predictor's time zone (None: no profiles)."""
        if self.book is None:
            return None
        return min(int(_into_day(self.book, at) // (DAY_SECONDS / self.book.buckets)), self.book.buckets - 1)

    def until_peak(self, node: str, at: float) -> float | None:
        """Seconds from ``at`` until the node's predicted peak's time-of-day bucket begins, in the predictor's
        time zone (0 within it); None without profiles or when a pod on it is unknown."""
        found = self.book.peak(node) if self.book is not None else None
        if self.book is None or found is None:
            return None
        into_day = _into_day(self.book, at)
        width = DAY_SECONDS / self.book.buckets
        start = found[1] * width
        if start <= into_day < start + width:
            return 0.0
        # the bucket's local start today or tomorrow, in real seconds (a clock change between counts)
        local = datetime.fromtimestamp(at, ZoneInfo(self.book.settings.history.time_zone))
        day = local.date() + timedelta(days=0 if into_day < start else 1)
        begins = datetime.combine(day, time(), local.tzinfo) + timedelta(seconds=start)
        return max(0.0, begins.timestamp() - at)

    def with_caps(self, caps: Mapping[str, int]) -> PredictedLoad:
        merged = dict(self.peak_caps)
        for node, cap in caps.items():
            merged[node] = min(cap, merged.get(node, cap))
        return replace(self, peak_caps=MappingProxyType(merged))

    def moved(self, pod: PodKey, source: str, destination: str | None) -> PredictedLoad:
        """After a planned eviction: the pod's predicted load leaves ``source`` and lands on ``destination``
        (with profiles: both nodes re-predicted by their coincident peak)."""
        if self.coincident(pod):
            moves = {**self.moves, pod: destination}
            after = replace(self, moves=MappingProxyType(moves))
            nodes = dict(self.node_cpu_m)
            for node in (source, destination):
                if node is not None and node in nodes:
                    value = after.peak_after(node)
                    if value is not None:
                        nodes[node] = value
            return replace(after, node_cpu_m=MappingProxyType(nodes))
        usage = self.pod_cpu_m.get(pod)
        if usage is None:
            return self
        nodes = dict(self.node_cpu_m)
        if source in nodes:
            nodes[source] -= usage
        if destination is not None and destination in nodes:
            nodes[destination] += usage
        return replace(self, node_cpu_m=MappingProxyType(nodes))


def _into_day(book: PeakBook, at: float) -> int:
    """Seconds from local midnight to ``at``, in the predictor's time zone."""
    local = datetime.fromtimestamp(at, ZoneInfo(book.settings.history.time_zone))
    return local.hour * 3600 + local.minute * 60 + local.second
