"""A LowNodeUtilization move under every target (pure): beside the CPU room the room search and the landing
predictor weigh, the memory and pods a destination keeps under their targets after the move
(:class:`~strategies.resources.ExtraRoom`), and how much of a resource a candidate takes off its node."""

from __future__ import annotations

from collections.abc import Callable

from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.candidates import Candidate
from strategies.landing import TOLERANCE, Landing, LandingPredictor, LandingVerdict, percent
from strategies.placement import Placement, RoomTracker
from strategies.resources import ExtraRoom, pod_amount

UNKNOWN_MEMORY = "memory usage unknown (missing is never read as zero): no destination's memory room can be told"


def cpu_of(candidate: Candidate) -> int:
    return candidate.usage_m


def amount_of(snapshot: ClusterSnapshot, resource: str) -> Callable[[Candidate], int]:
    """How much of ``resource`` moving a candidate takes off its node (its CPU usage, memory, one pod)."""
    if resource == "cpu":
        return cpu_of
    return lambda c: pod_amount(snapshot, c.pod, resource) or 0


def split_unknown_memory(pool: list[Candidate], snapshot: ClusterSnapshot) -> tuple[list[Candidate], list[Candidate]]:
    """The candidates of known memory, and the others (never moved under memory thresholds)."""
    known: list[Candidate] = []
    unknown: list[Candidate] = []
    for candidate in pool:
        (known if snapshot.memory_of(candidate.pod) is not None else unknown).append(candidate)
    return known, unknown


def placement_under_every_target(
    tracker: RoomTracker, extra: ExtraRoom, candidate: Candidate, node: str, placement: Placement
) -> Placement:
    """The first destination of the room search (from ``placement`` on) that keeps memory and pods under
    their targets too, or why none does (the first refusal, naming the resource)."""
    excluded = {node}
    first_refusal = None
    while placement.node is not None:
        refused = extra.refusal(placement.node, candidate.pod)
        if refused is None:
            return placement
        first_refusal = first_refusal or refused
        excluded.add(placement.node)
        placement = tracker.find(candidate.pod, candidate.usage_m, exclude=excluded)
    return Placement(None, f"no destination keeps every resource under target: the move {first_refusal}")


def landing_under_every_target(
    predictor: LandingPredictor, extra: ExtraRoom, candidate: Candidate, node: str, landing: Landing
) -> Landing:
    """The predictor weighs CPU room alone: a landing on a destination the move would put over its memory or
    pods target relieves nothing either, so its probability adds to the landing risk (refused as NO_ROOM
    above maxLandingRisk, or when the likeliest landing is such a destination)."""
    assert landing.node is not None
    pod = candidate.pod
    refused = extra.refusal(landing.node, pod)
    if refused is not None:
        text = f"predicted to land on {landing.node}, but the move {refused}"
        return Landing(None, text, LandingVerdict.NO_ROOM, landing.risk)
    mass, likeliest = predictor.mass_refused(pod, node, candidate.usage_m, extra.refuser(pod))
    if likeliest is None:
        return landing
    risk, cap = landing.risk + mass, predictor.max_risk
    over = f"{percent(mass)} on destinations the move would put over a target (it {likeliest})"
    if risk > cap + TOLERANCE:
        text = f"predicted landing risk {percent(risk)} > maxLandingRisk {percent(cap)}: {over}"
        return Landing(None, text, LandingVerdict.NO_ROOM, risk)
    return Landing(landing.node, f"{landing.reason}; {over}", risk=risk, caveat=landing.caveat)
