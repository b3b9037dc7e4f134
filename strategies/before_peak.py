"""LowNodeUtilization before the peak (pure): which pods relieve a node's coincident peak, which nodes are
due for relief, and the predicted peaks a move must not take a destination past.

With ``classifyBy: predicted`` and the pods' daily profiles a node is hot when its coincident peak is over
target. With ``beforePeak`` it is relieved only within that long before its peak's time-of-day bucket
begins (or during it): the pre-peak schedule, once a day per node, instead of every cycle the prediction
says so; a node predicted over target whose peak is not near yet is reported normal, saying when it comes,
so that nothing (the landing guard included) treats it as hot now.

The pods moved first make that peak (the most relief of the node's peak, not the pod's own peak); a pod
whose replacement the predictor could only predict from its request (no other pod of its workload has
history) is not moved: where it lands could not be judged as the next prediction will judge it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from rebalancer.domain.model import PodKey
from rebalancer.domain.quantity import cores_text
from rebalancer.planning.plan import NodeClass
from rebalancer.planning.predicted import PredictedLoad
from strategies.candidates import Candidate
from strategies.thresholds import NodeClasses

NOT_COINCIDING = "its daily profile does not make the node's predicted peak: moving it would not lower it"
NO_SUCCESSOR = (
    "no other pod of its workload has history: its replacement would be predicted from its request, so "
    "where it lands cannot be judged before the peak"
)


def hold_until_due(
    classes: NodeClasses, hot: Collection[str], peaks: PredictedLoad, at: float, lead: timedelta
) -> list[str]:
    """The hot nodes due for relief: their predicted peak begins within ``lead`` of ``at`` (or has begun).
    The others are held normal in ``classes``, their record saying when their peak comes."""
    due = []
    for name in hot:
        until = peaks.until_peak(name, at)
        if until is None or until <= lead.total_seconds():
            due.append(name)
            continue
        pct = classes.pct[name] or 0.0
        band = classes.band(name)
        hours = until / 3600
        classes.hold(
            name,
            NodeClass.NORMAL,
            f"predicted peak usage {pct:.1f}% > target {band.high_pct:.1f}%, in {hours:.1f} h: relieved from "
            f"beforePeak {_duration(lead)} ahead",
        )
    return due


def peak_caps(classes: NodeClasses) -> dict[str, int]:
    """Every node's target, as a predicted peak no move of this cycle may take it past."""
    return {name: classes.cap_m(name) for name in classes.of}


def over_peak_cap(peaks: PredictedLoad, pod: PodKey, room_on: str) -> str | None:
    """Why ``room_on`` may not take the pod (its predicted peak with the pod's replacement past the cap a
    strategy that relieves nodes before their peak set on it); None when it may (unknown peaks are not
    refused here: classes already say unknown)."""
    if room_on not in peaks.peak_caps or not peaks.coincident(pod):
        return None
    cap = peaks.peak_caps[room_on]
    peak = peaks.peak_after(room_on, add=(pod,))
    if peak is None or peak <= cap:
        return None
    return f"{room_on}'s predicted peak would reach {cores_text(peak)} with it > {cores_text(cap)} (kept under target)"


@dataclass(slots=True)
class PeakRelief:
    """How much moving each pod off ``node`` lowers the node's coincident peak, with the moves planned so far."""

    peaks: PredictedLoad | None
    node: str

    def excess(self, target_m: int, fallback: int) -> int:
        peak = self.peaks.peak_after(self.node) if self.peaks is not None else None
        return fallback if peak is None else peak - target_m

    def sizes(self, pool: list[Candidate]) -> dict[PodKey, int]:
        peaks = self.peaks
        now = peaks.peak_after(self.node) if peaks is not None else None
        sizes = {}
        for c in pool:
            after = peaks.peak_after(self.node, remove=(c.pod.key,)) if peaks is not None else None
            sizes[c.pod.key] = c.usage_m if now is None or after is None else now - after
        return sizes

    def coinciding(self, pool: list[Candidate]) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
        """The candidates whose move lowers the node's peak and whose replacement the predictor can judge;
        the others, each with why it is passed over."""
        sizes = self.sizes(pool)
        kept, passed = [], []
        for c in pool:
            if sizes[c.pod.key] <= 0:
                passed.append((c, NOT_COINCIDING))
            elif self.peaks is not None and self.peaks.successor_profile(c.pod.key) is None:
                passed.append((c, NO_SUCCESSOR))
            else:
                kept.append(c)
        return kept, passed


def _duration(lead: timedelta) -> str:
    minutes = int(lead.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
