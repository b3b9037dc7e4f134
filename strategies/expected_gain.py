"""The expected gain of a planned eviction, in hot-node-minutes (pure).

An eviction disrupts a workload; it is worth it only when it saves more hot time on the node it relieves
(the *source*) than it may add on the node its replacement goes to (the *destination*):

    gain = saved on the source - added on the destination        (hot-node-minutes)

**From the pods' daily profiles** (``classifyBy: predicted`` with ``predictor.nodePeak: coincident``, the
predictor's book of per-pod (days x time-of-day buckets) profiles): over the next :data:`PROFILE_HORIZON`
hours from the snapshot's time, each bucket counts its width in minutes times the share of the profile's
days on which the node's summed profile (plus its system usage) is above its target. ``saved`` is the
source's count with the moves planned so far less its count without the pod too; ``added`` is the
destination's count with the pod's replacement (as the next prediction will see it) less its count
without it. How long the relief lasts, and the chance the source turns hot again anyway (other pods
keeping it over target in those hours), are in those counts: a bucket the source is hot in with or
without the pod saves nothing.

**From the current reading alone** (no profiles: the shipped default policy has no predictor), with
stated assumptions: a hot node is taken to stay hot for :data:`RELIEF_MINUTES` more minutes without the
move, and the move saves that time in proportion to the part of the node's remaining excess the pod
takes away, over the level the relief takes the node down to (its receive threshold where set, else its
target) (``min(pod, excess) / excess``: a pod that covers the excess saves it all, one
that covers a third saves a third; the chance of turning hot again is not known and taken as zero), and
saves nothing when the node would stay over target anyway: its pods that cannot leave (unknown usage, or
more than any receiver has room for) keep it above target (their usage, or the node's less that of the
others, whichever is higher). The
destination is taken to turn hot for those :data:`RELIEF_MINUTES` when its usage with the pod's
predicted peak (its usage when none is predicted) exceeds its target; a destination found with room for
the pod's usage adds nothing unless a predicted peak says more.

**Never worth moving**, whatever the threshold: a move whose gain is not positive, and

- *hot by itself*: the pod's usage, or its predicted peak when the snapshot holds one, is above the
  target of every node of the pool that could receive it (the largest target there): wherever it goes,
  it makes that node hot alone; no placement fixes it.
- *its burst follows it* (on the current reading; with profiles, the destination's added minutes count
  the pod's bursts where they land): the pod's burst, its usage above its CPU request (a pod without a CPU
  request is not judged), is at least the source's excess over target. Without the pod's own burst the
  node would be at or under target: its hot time is the pod's, it goes where the pod goes and ends when
  the burst ends, so moving the pod only spreads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from rebalancer.domain.quantity import cores_text
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.candidates import Candidate

RELIEF_MINUTES = 30.0
"""From the current reading alone: how long a hot node is taken to stay hot without the move (a reactive
cycle finds a node 10-20 minutes into an episode; most episodes of the shared Bitbrains sample are over
within the hour)."""
PROFILE_HORIZON = 6
"""From the pods' daily profiles: the hours ahead the hot minutes are counted over."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Gain:
    """Hot-node-minutes a move is expected to save on its source and add on its destination."""

    saved: float
    added: float
    basis: str  # how they were estimated, for the decision record

    @property
    def net(self) -> float:
        return self.saved - self.added

    def text(self) -> str:
        return f"expected gain {self.net:.1f} min ({self.saved:.1f} saved on the source, {self.added:.1f} added on the destination; {self.basis})"


@dataclass(frozen=True, slots=True)
class CurrentMove:
    """A move judged on the current reading, in millicores."""

    pod_m: int  # the pod's usage
    source_m: int  # the source's usage with the moves planned so far
    source_target_m: int
    destination_m: int | None  # the destination's usage with the moves planned so far (None: unknown)
    destination_target_m: int
    pod_peak_m: int | None = None  # the pod's predicted peak, when the snapshot holds a prediction
    source_floor_m: int = 0  # what no move can take off the source (its pods that cannot leave)
    source_relief_m: int | None = None  # the usage a relief takes the source down to (None: its target)


def current_gain(move: CurrentMove) -> Gain:
    """The gain of ``move`` from the current reading alone (see the module's docstring)."""
    excess = move.source_m - (move.source_target_m if move.source_relief_m is None else move.source_relief_m)
    stays_hot = move.source_floor_m > move.source_target_m  # what cannot leave keeps it hot: nothing is saved
    saved = RELIEF_MINUTES * min(move.pod_m, excess) / excess if excess > 0 and not stays_hot else 0.0
    peak = max(move.pod_m, move.pod_peak_m or 0)
    hot_there = move.destination_m is None or move.destination_m + peak > move.destination_target_m
    added = RELIEF_MINUTES if hot_there else 0.0
    return Gain(saved, added, f"current usage, relief assumed to last {RELIEF_MINUTES:.0f} min")


def hot_minutes(total: FloatArray, target_m: float, buckets: tuple[int, ...], bucket_minutes: float) -> float:
    """Expected minutes over ``target_m`` in ``buckets`` of a (days, buckets) summed profile (its system
    usage included): each bucket's width times the share of days it is over target in."""
    if not buckets:
        return 0.0
    over = np.asarray(total, dtype=np.float64)[:, list(buckets)] > target_m
    return float(over.mean(axis=0).sum() * bucket_minutes)


@dataclass(frozen=True, slots=True)
class ProfileMove:
    """A move judged on the pods' daily profiles: (days, buckets) arrays in millicores, system usage included
    in the node totals."""

    source: FloatArray  # the source's summed profile with the moves planned so far
    pod: FloatArray  # the pod's own profile (what leaves the source)
    destination: FloatArray  # the destination's summed profile with the moves planned so far
    arriving: FloatArray  # the profile the pod's replacement is predicted with (what lands)
    source_target_m: int
    destination_target_m: int


def horizon(start: int, buckets: int, hours: int = PROFILE_HORIZON) -> tuple[int, ...]:
    """The time-of-day buckets from ``start`` over the next ``hours`` (wrapping past midnight)."""
    count = min(buckets, max(1, round(hours * buckets / 24)))
    return tuple((start + i) % buckets for i in range(count))


def profile_gain(move: ProfileMove, start: int) -> Gain:
    """The gain of ``move`` over :data:`PROFILE_HORIZON` hours from bucket ``start`` (see the module's
    docstring)."""
    buckets = move.source.shape[1]
    ahead = horizon(start, buckets)
    width = 1440.0 / buckets
    saved = hot_minutes(move.source, move.source_target_m, ahead, width) - hot_minutes(
        move.source - move.pod, move.source_target_m, ahead, width
    )
    added = hot_minutes(move.destination + move.arriving, move.destination_target_m, ahead, width) - hot_minutes(
        move.destination, move.destination_target_m, ahead, width
    )
    return Gain(saved, added, f"daily profiles, the next {PROFILE_HORIZON} h")


def hot_by_itself(pod_m: int, pod_peak_m: int | None, largest_target_m: int | None) -> str | None:
    """Why the pod makes any node of its pool hot alone (None: it does not, or the pool has no receiver)."""
    if largest_target_m is None:
        return None
    level, what = (pod_peak_m, "predicted peak") if pod_peak_m is not None and pod_peak_m > pod_m else (pod_m, "usage")
    if level <= largest_target_m:
        return None
    return (
        f"not worth moving: hot by itself: its {what} {cores_text(level)} > {cores_text(largest_target_m)}, the "
        "largest target of a node of its pool that could receive it (no placement fixes it)"
    )


def burst_follows(pod_m: int, usual_m: float | None, excess_m: int) -> str | None:
    """Why the node's hot excess is the pod's own burst (None: it is not, or the pod's usual level is
    unknown)."""
    if usual_m is None or excess_m <= 0:
        return None
    burst = pod_m - usual_m
    if burst < excess_m:
        return None
    return (
        f"not worth moving: its burst follows it: usage {cores_text(pod_m)} is {cores_text(round(burst))} above its "
        f"usual {cores_text(round(usual_m))}, at least the node's {cores_text(excess_m)} above target (the node "
        "is hot by the pod's own burst, which goes where the pod goes)"
    )


def below_threshold(gain: Gain, minimum: float) -> str | None:
    """Why the move is not worth it (None: its gain is positive and clears ``minimum``): a move that saves
    nothing is never worth an eviction."""
    if gain.net > 0 and gain.net >= minimum:
        return None
    bar = f"< minExpectedGain {minimum:g} min" if gain.net < minimum else "(it saves nothing)"
    return f"not worth moving: {gain.text()} {bar}"


@dataclass(frozen=True, slots=True)
class Receivers:
    """Per pool (``""``: every pool together, when destinations may be in any pool), the largest target and
    the largest room under its target of the nodes that could receive a pod, at the start of the plan."""

    largest_target: Mapping[str, int]
    largest_room: Mapping[str, int]
    same_pool: bool

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, targets: Mapping[str, int], same_pool: bool) -> Receivers:
        """``targets``: each receiving node's target in millicores."""
        largest: dict[str, int] = {}
        room: dict[str, int] = {}
        for name, target in targets.items():
            key = snapshot.pool_of[name] if same_pool else ""
            largest[key] = max(target, largest.get(key, target))
            usage = snapshot.load[name].usage_m
            if usage is not None:  # unknown usage: never a destination
                room[key] = max(target - usage, room.get(key, target - usage))
        return cls(largest, room, same_pool)

    def target(self, snapshot: ClusterSnapshot, source: str) -> int | None:
        return self.largest_target.get(snapshot.pool_of[source] if self.same_pool else "")

    def room(self, snapshot: ClusterSnapshot, source: str) -> int | None:
        return self.largest_room.get(snapshot.pool_of[source] if self.same_pool else "")


@dataclass(slots=True)
class MoveJudge:
    """Judges LowNodeUtilization's candidate moves on a snapshot (``minExpectedGain`` set): the refusals
    above, then the gain against ``minimum``. ``target_of``: each node's target in millicores;
    ``landed``: usage this plan moved onto each destination so far."""

    snapshot: ClusterSnapshot
    minimum: float
    target_of: Callable[[str], int]
    receivers: Receivers
    landed: dict[str, int] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)

    def refusal(
        self,
        candidate: Candidate,
        source: str,
        destination: str,
        excess_m: int,
        peaks: PredictedLoad | None,
        level_m: int,
    ) -> str | None:
        """Why moving ``candidate`` off ``source`` onto ``destination`` is not worth it (None: it is).
        ``excess_m``: the source's remaining excess over ``level_m``, the usage its relief goes down to; ``peaks``: the
        predicted load with the moves planned so far, when the strategy plans on the nodes' coincident peaks."""
        pod = candidate.pod
        predicted = self.snapshot.predicted
        pod_peak = predicted.pod_cpu_m.get(pod.key) if predicted is not None else None
        why = hot_by_itself(candidate.usage_m, pod_peak, self.receivers.target(self.snapshot, source))
        if why is not None:
            return why
        gain = self._profile_gain(candidate, source, destination, peaks) if peaks is not None else None
        if gain is None:
            usual = float(pod.cpu_request_m) if pod.cpu_request_m > 0 else None
            why = burst_follows(candidate.usage_m, usual, excess_m)
            if why is not None:
                return why
            gain = current_gain(self._current_move(candidate, source, destination, (level_m, excess_m), pod_peak))
        return below_threshold(gain, self.minimum)

    def commit(self, destination: str, usage_m: int) -> None:
        self.landed[destination] = self.landed.get(destination, 0) + usage_m

    def _current_move(
        self, candidate: Candidate, source: str, destination: str, excess: tuple[int, int], pod_peak: int | None
    ) -> CurrentMove:
        """``excess``: the source's level its relief is taken down to, and its usage over it."""
        level, over = excess
        load = self.snapshot.load.get(destination)
        usage = load.usage_m if load is not None else None
        there = None if usage is None else usage + self.landed.get(destination, 0)
        return CurrentMove(
            candidate.usage_m,
            level + over,
            self.target_of(source),
            there,
            self.target_of(destination),
            pod_peak,
            self._floor(source),
            level,
        )

    def _floor(self, source: str) -> int:
        """What no move of this plan can take off the source: the usage of its pods that cannot leave (unknown
        usage, or more than the largest room of a receiver) and, when higher, the node's usage less that of
        the others. Protected pods are counted as if they could leave, and room as it was before any move, so
        the floor errs low."""
        found = self.floors.get(source)
        if found is None:
            room = self.receivers.room(self.snapshot, source)
            movable = staying = 0
            for pod in self.snapshot.pods_on(source):
                usage = self.snapshot.pod_usage.get(pod.key)
                if usage is not None and room is not None and usage <= room:
                    movable += usage
                elif usage is not None:
                    staying += usage
            load = self.snapshot.load[source].usage_m
            found = self.floors[source] = staying if load is None else max(staying, load - movable)
        return found

    def _profile_gain(self, candidate: Candidate, source: str, destination: str, peaks: PredictedLoad) -> Gain | None:
        """The gain from the daily profiles; None when a profile is missing (the current reading judges)."""
        key = candidate.pod.key
        book = peaks.book
        own = book.profile(key) if book is not None else None
        start = peaks.bucket_at(self.snapshot.taken_at)
        there = peaks.profile_after(source)
        landing = peaks.profile_after(destination)
        if own is None or start is None or there is None or landing is None:
            return None
        arriving = peaks.successor_profile(key)
        move = ProfileMove(
            there,
            np.asarray(own, dtype=np.float64),
            landing,
            np.asarray(own, dtype=np.float64) if arriving is None else arriving,
            self.target_of(source),
            self.target_of(destination),
        )
        return profile_gain(move, start)
