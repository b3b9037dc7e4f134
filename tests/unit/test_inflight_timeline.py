"""The in-flight correction against a timeline: a node's reading computed as Prometheus computes the default
queries (each sample the mean of the node's load over the rate window before it, samples on the step's
multiples, the quantile interpolated linearly) from the node's true load, minute by minute after an eviction.
The corrected usage must be the true load: moved load counted once, never twice, never dropped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.efficiency_records import EvictedPod, Relief
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.inflight import EarlierReliefs, corrected, in_flight
from rebalancer.planning.reading_model import Reading
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, pod, policy

T0 = 1_700_000_040.0  # on a minute
LNU = "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 70}\npredictPlacement: false\n"
DEFAULTS = Reading(600, 0.95, 300, 60)  # prometheus: window 10m, quantile 0.95, step 1m, rateWindow 5m


def reading_of(load: Callable[[float], float], at: float, r: Reading = DEFAULTS) -> int:
    """The node's reading at ``at``: the quantile of the subquery's samples, each the mean load over the
    rate window before it in one-second slices (a gauge: the load at the sample)."""
    newest = (at // r.step) * r.step
    stamps = [newest - k * r.step for k in range(max(1, int(r.window // r.step)))]
    width = int(r.rate_window)
    samples = [sum(load(s - width + i + 0.5) for i in range(width)) / width if width else load(s) for s in stamps]
    return round(float(numpy.quantile(samples, r.quantile)))


# -- one eviction, minute by minute, through the planning cycle --------------------------------------

EVICTED_AT = T0 + 17
CREATED = EVICTED_AT + 2  # the controller creates the replacement at once
STARTED = CREATED + 10  # its container runs ten seconds later
MOVED = 1500
SOURCE, RECEIVER = 5500, 2000  # the nodes' load besides the moved pod


def true_source(t: float) -> float:
    return SOURCE + (MOVED if t < EVICTED_AT else 0)


def true_receiver(t: float) -> float:
    return RECEIVER + (MOVED if t >= STARTED else 0)


def test_the_receiver_is_corrected_by_what_its_own_reading_does_not_show_yet_minute_by_minute() -> None:
    """The replacement reads no usage of its own for rateWindow plus a step (young), but the receiver's
    reading holds more of it with each sample: the correction adds only the rest. Tolerance: what a reading
    gains of the moved load in the ten seconds between the replacement's creation (taken as its start) and
    its container's start, MOVED * 10 / rateWindow, plus rounding."""
    record = Relief(
        "src", "default", "LowNodeUtilization", EVICTED_AT, 70.0, 70.0,
        (EvictedPod("default", "web-1", "Deployment/default/web", MOVED, landed="recv", replacement="default/web-2"),),
        EVICTED_AT + 900, measured_m=reading_of(lambda t: true_source(min(t, EVICTED_AT)), EVICTED_AT),
    )  # fmt: skip
    nodes = [node("src", 10_000), node("recv", 10_000)]
    replacement = msgspec.structs.replace(pod("web-2", "recv"), created=CREATED)
    pods = [pod("other", "src", workload="api"), pod("base", "recv", workload="db"), replacement]
    tolerance = MOVED * 10 / 300 + 2
    errors = []
    for k in range(1, 35):  # every half minute for 17 minutes, from when the replacement runs
        at = EVICTED_AT + 30 * k
        young = at - CREATED < 360  # the default youngPods query: no usage of its own yet
        own = {} if young else {("default", "web-2"): MOVED}
        report = UsageReport(
            node_cpu_m={"src": reading_of(true_source, at), "recv": reading_of(true_receiver, at)},
            pod_cpu_m={("default", "other"): SOURCE, ("default", "base"): RECEIVER, **own},
        )
        snapshot, _ = plan_cycle(
            ClusterFacts(tuple(nodes), tuple(pods)), report, policy(LNU), at, reliefs=EarlierReliefs((record,))
        )
        for name, truth in (("src", true_source(at)), ("recv", true_receiver(at))):
            got = snapshot.load[name].usage_m
            assert got is not None
            errors.append((k * 30, name, report.node_cpu_m[name], got, truth))
    wrong = [e for e in errors if abs(e[3] - e[4]) > tolerance]
    assert not wrong, "(seconds after the eviction, node, reading, corrected, true load):\n" + "\n".join(
        map(str, wrong)
    )


# -- any reliefs, any reading ------------------------------------------------------------------------

NOW = T0 + 1200
NODES = ("n0", "n1", "n2")


@dataclass(frozen=True)
class Move:
    source: str
    at: float
    usage_m: int
    landed: str | None  # None: its replacement not seen yet
    delay: float  # from the eviction to the replacement's start
    running: bool  # False: bound, not started (Pending)


def _move(source: str, age: int, usage_m: int, landed: str | None, delay: int, running: bool) -> Move:
    # a running replacement started by now; one still Pending is counted while its relief is in the reading's
    # reach: a recent one here
    if running:
        return Move(source, NOW - age, usage_m, landed, min(delay, age), running)
    return Move(source, NOW - age % 100, usage_m, landed, delay, running)


moves_st = st.lists(
    st.builds(
        _move,
        st.sampled_from(NODES),
        st.integers(0, 1500),
        st.integers(1, 5000),
        st.one_of(st.none(), st.sampled_from(NODES)),
        st.integers(0, 120),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
).map(lambda ms: [m for m in ms if m.landed != m.source])
readings_st = st.builds(
    Reading,
    st.sampled_from([300, 600, 900]),
    st.sampled_from([0.5, 0.9, 0.95, 0.99, 1.0]),
    st.sampled_from([0, 60, 120, 300]),
    st.sampled_from([30, 60]),
)


@settings(max_examples=60, deadline=None)
@given(moves=moves_st, reading=readings_st, bases=st.tuples(*(st.integers(0, 20_000) for _ in NODES)))
def test_moved_load_is_counted_once_whatever_the_reading_and_the_moves(
    moves: list[Move], reading: Reading, bases: tuple[int, ...]
) -> None:
    """The corrected usage is the true load (a replacement counts from when it is bound) within rounding
    when a node's moves all go one way; when load both left and landed on a node within the window, the
    quantile of their sum is not the sum of their quantiles: within the smaller of the two amounts."""
    base = dict(zip(NODES, bases, strict=True))

    def load(name: str, running_only: bool) -> Callable[[float], float]:
        def at(t: float) -> float:
            total = float(base[name])
            for m in moves:
                if m.source == name and t < m.at:
                    total += m.usage_m
                if m.landed == name and (t >= m.at + m.delay if m.running else not running_only and t >= m.at):
                    total += m.usage_m
            return total

        return at

    reliefs = [
        Relief(
            m.source, "default", "LowNodeUtilization", m.at, 70.0, 90.0,
            (EvictedPod("default", f"p{i}", "Deployment/default/web", m.usage_m, landed=m.landed,
                        replacement=None if m.landed is None else f"default/p{i}-2"),),
            m.at + 900, measured_m=reading_of(load(m.source, True), m.at, reading),
        )
        for i, m in enumerate(moves)
    ]  # fmt: skip
    started = {f"default/p{i}-2": (m.at + m.delay if m.running else None) for i, m in enumerate(moves) if m.landed}
    flights = in_flight(reliefs, NOW, reading, started)
    for name in NODES:
        measured = reading_of(load(name, True), NOW, reading)
        truth = load(name, False)(NOW)
        flight = flights.get(name)
        got = measured if flight is None else corrected(measured, flight)
        assert got is not None
        left = sum(m.usage_m for m in moves if m.source == name and NOW - m.at < reading.window + reading.rate_window)
        came = sum(m.usage_m for m in moves if m.landed == name and NOW - m.at < reading.window + reading.rate_window)
        tolerance = 2 * len(moves) + 1 + min(left, came)
        assert abs(got - truth) <= tolerance, (name, measured, got, truth, flight)
