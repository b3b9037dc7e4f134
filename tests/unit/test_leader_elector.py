"""LeaderElector against an in-memory Lease with resourceVersion conflicts, on fake clocks; the thread runner.

The property test runs random interleavings of steps, clock advances, slow requests, partitions, lost
replies and releases for three candidates whose clocks are offset from each other, and checks at every
point that at most one of them leads, that a leader is the Lease's holder, and that a candidate only ever
wins after every other leadership has lapsed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.domain.errors import ConfigError, KubeUnavailable, LeaseConflict
from rebalancer.service.leader import LeaderElection, LeaderElector, LeaseRecord
from tests.fake_clock import FakeClock

D, R, P = 15.0, 10.0, 2.0  # client-go's defaults: lease duration, renew deadline, retry period
EPOCH = 1_714_560_000.0  # 2024-05-01T10:40:00Z


class Leases:
    """One Lease in memory, with the API server's optimistic concurrency on resourceVersion."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.writes: list[LeaseRecord] = []
        self.lock = threading.RLock()  # the runner tests write from several threads

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        self.writes.append(self.record)
        return self.record

    def touch(self) -> None:
        """Another writer changes something else (a label): a new resourceVersion, the same fields."""
        assert self.record is not None
        self._store(self.record)


@dataclass
class View:
    """One candidate's connection to the Lease: it can be cut off, lose replies, or be slow."""

    leases: Leases
    clock: FakeClock
    down: bool = False
    lose_replies: bool = False  # writes reach the server, the answers never come back
    latency: float = 0.0  # each request takes this long on the shared clock to reach the server...
    reply_latency: float = 0.0  # ... and each answer this long to come back
    before_write: Callable[[], object] | None = None  # once, just before the next write is applied
    on_commit: Callable[[], object] | None = None  # after every write is applied, before its answer leaves
    calls: int = 0

    def _request(self) -> None:
        self.calls += 1
        self.clock.advance(self.latency)
        if self.down:
            raise KubeUnavailable("lease: cannot reach the Kubernetes API")

    def get(self) -> LeaseRecord | None:
        self._request()
        record = self.leases.record
        self.clock.advance(self.reply_latency)
        return record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._request()
        with self.leases.lock:
            self._hook()
            if self.leases.record is not None:
                raise LeaseConflict('leases.coordination.k8s.io "rebalancer" already exists')
            stored = self.leases._store(record)
        return self._answer(stored)

    def update(self, record: LeaseRecord, resource_version: str) -> LeaseRecord:
        self._request()
        with self.leases.lock:
            self._hook()
            current = self.leases.record
            if current is not None and current.resource_version != resource_version:
                raise LeaseConflict("the object has been modified; please apply your changes to the latest version")
            stored = self.leases._store(record)
        return self._answer(stored)

    def _hook(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()

    def _answer(self, stored: LeaseRecord) -> LeaseRecord:
        if self.on_commit is not None:
            self.on_commit()
        self.clock.advance(self.reply_latency)
        if self.lose_replies:
            raise KubeUnavailable("update lease: no answer within 10s", reason="Timeout")
        return stored


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def leases() -> Leases:
    return Leases()


def candidate(
    leases: Leases, clock: FakeClock, identity: str, *, lease: float = D, renew: float = R, retry: float = P
) -> tuple[LeaderElector, View]:
    view = View(leases, clock)
    elector = LeaderElector(view, identity, lease, renew, retry, clock=clock, wall_clock=lambda: EPOCH + clock.now)
    return elector, view


# --- acquiring -----------------------------------------------------------------------------------------


def test_acquires_when_there_is_no_lease(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a")

    assert a.step(clock.now) is True

    assert leases.record == LeaseRecord("a", 15, EPOCH + 100, EPOCH + 100, 0, "1")
    assert a.is_leader(clock.now) and a.holder == "a" and a.last_error is None
    assert a.leading_until() == clock.now + R


def test_respects_a_lease_held_by_another_until_it_expires_on_its_own_clock(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    a.step(clock.now)  # then a dies
    clock.advance(1)
    assert b.step(clock.now) is False  # b first sees this version now: it expires 15 s later by b's clock
    assert b.holder == "a" and b.last_error is None

    clock.advance(D - 0.001)
    assert b.step(clock.now) is False
    clock.advance(0.001)
    assert b.step(clock.now) is True

    assert leases.record is not None
    assert (leases.record.holder, leases.record.transitions) == ("b", 1)
    assert leases.record.acquire_time == leases.record.renew_time == EPOCH + clock.now


def test_a_lease_found_long_expired_is_still_waited_for_one_full_duration(leases: Leases, clock: FakeClock) -> None:
    """renewTime comes from another host's clock and is never trusted: only a version seen here ages."""
    leases._store(LeaseRecord("gone", 15, EPOCH - 86_400, EPOCH - 86_400, 3))
    b, _ = candidate(leases, clock, "b")

    assert b.step(clock.now) is False
    clock.advance(D)
    assert b.step(clock.now) is True
    assert leases.record is not None and leases.record.transitions == 4


def test_the_leases_own_duration_counts_and_a_missing_one_is_ours(leases: Leases, clock: FakeClock) -> None:
    leases._store(LeaseRecord("x", 60, None, None, 0))
    b, _ = candidate(leases, clock, "b")
    b.step(clock.now)
    clock.advance(59)
    assert b.step(clock.now) is False  # 60 s written by the holder, not our 15
    clock.advance(1)
    assert b.step(clock.now) is True

    leases._store(LeaseRecord("y", None, None, None, 0))
    c, _ = candidate(leases, clock, "c")
    c.step(clock.now)
    clock.advance(D - 0.1)
    assert c.step(clock.now) is False  # no duration written: held for our own lease duration, not zero
    clock.advance(0.1)
    assert c.step(clock.now) is True


def test_a_renewal_of_someone_else_restarts_the_wait(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    a.step(clock.now)
    b.step(clock.now)
    for _ in range(20):  # a renews every 2 s for 40 s: b never gets it
        clock.advance(P)
        assert a.step(clock.now) is True
        assert b.step(clock.now) is False
    clock.advance(5)
    leases.touch()  # any new version counts as a sign of life, even one that only changed a label
    b.step(clock.now)
    clock.advance(D - 1)
    assert b.step(clock.now) is False
    clock.advance(1)
    assert b.step(clock.now) is True


def test_a_held_lease_with_our_name_is_taken_back_at_once(leases: Leases, clock: FakeClock) -> None:
    """Our own identity in the Lease (a restart of this process): no wait, and no transition counted."""
    leases._store(LeaseRecord("a", 15, EPOCH, EPOCH, 2))
    a, _ = candidate(leases, clock, "a")

    assert a.step(clock.now) is True
    assert leases.record is not None
    assert (leases.record.acquire_time, leases.record.transitions) == (EPOCH, 2)


def test_wrong_timing_is_refused() -> None:
    leases, clock = Leases(), FakeClock()
    with pytest.raises(ConfigError, match="retryPeriod < renewDeadline < leaseDuration"):
        LeaderElector(View(leases, clock), "a", lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ConfigError, match="retryPeriod < renewDeadline"):
        LeaderElector(View(leases, clock), "a", lease_duration=15, renew_deadline=2, retry_period=2)
    with pytest.raises(ConfigError, match="identity"):
        LeaderElector(View(leases, clock), "", clock=clock)


def test_a_fractional_duration_is_written_rounded_up(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a", lease=1.5, renew=1.2, retry=0.2)
    a.step(clock.now)
    assert leases.record is not None and leases.record.duration == 2  # never shorter than we believe


# --- renewing ------------------------------------------------------------------------------------------


def test_renewals_keep_acquire_time_and_count_and_skip_the_read(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    a.step(clock.now)
    first = leases.record
    assert first is not None

    for _ in range(3):
        clock.advance(P)
        calls = view.calls
        assert a.step(clock.now) is True
        assert view.calls == calls + 1  # the fast path: one update, no get

    assert leases.record is not None
    assert leases.record.acquire_time == first.acquire_time and leases.record.transitions == 0
    assert leases.record.renew_time == EPOCH + clock.now and leases.record.resource_version == "4"
    assert a.leading_until() == clock.now + R


def test_a_stale_version_on_the_fast_path_falls_back_to_reading(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    a.step(clock.now)
    leases.touch()  # someone changed a label: the version a wrote last is stale
    clock.advance(P)
    calls = view.calls

    assert a.step(clock.now) is True  # update (409), get, update: still in this step
    assert view.calls == calls + 3 and a.last_error is None
    assert leases.record is not None and leases.record.holder == "a" and leases.record.transitions == 0


def test_a_leader_that_cannot_renew_stops_leading_at_the_deadline(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    a.step(clock.now)
    b.step(clock.now)
    start = clock.now
    view.down = True

    while clock.now + P < start + R:
        clock.advance(P)
        assert a.step(clock.now) is True  # the API is unreachable, but the deadline has not passed
        assert isinstance(a.last_error, KubeUnavailable)
    assert a.is_leader(start + R - 0.001)
    assert not a.is_leader(start + R)  # no contact needed to stop: the clock alone decides
    clock.advance(start + R - clock.now)
    assert a.step(clock.now) is False

    assert b.step(clock.now) is False  # b measures 15 s from when it saw a's last renewal
    clock.advance(start + D - clock.now)
    assert b.step(clock.now) is True
    view.down = False
    assert a.step(clock.now) is False and a.holder == "b"


def test_a_lapsed_leader_still_named_in_the_lease_takes_it_back(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    a.step(clock.now)
    view.down = True
    clock.advance(R + 1)
    assert a.step(clock.now) is False
    view.down = False

    assert a.step(clock.now) is True  # nobody wrote meanwhile (the version proves it): a renewal
    assert leases.record is not None and leases.record.transitions == 0


def test_a_lost_reply_is_a_failure_but_the_write_counts(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    view.lose_replies = True
    assert a.step(clock.now) is False
    assert leases.record is not None and leases.record.holder == "a"
    view.lose_replies = False

    assert a.step(clock.now) is True
    assert leases.record.transitions == 0


# --- conflicts -----------------------------------------------------------------------------------------


def test_two_candidates_racing_for_a_free_lease_one_wins(leases: Leases, clock: FakeClock) -> None:
    a, view_a = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    view_a.before_write = lambda: b.step(clock.now)  # b creates it between a's read and a's create

    assert a.step(clock.now) is False
    assert isinstance(a.last_error, LeaseConflict)
    assert b.is_leader(clock.now)
    assert a.step(clock.now) is False and a.last_error is None and a.holder == "b"


def test_two_candidates_racing_for_an_expired_lease_one_wins(leases: Leases, clock: FakeClock) -> None:
    old, _ = candidate(leases, clock, "old")
    a, view_a = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    old.step(clock.now)
    a.step(clock.now)
    b.step(clock.now)
    clock.advance(D)
    view_a.before_write = lambda: b.step(clock.now)  # both read the expired lease; b writes first

    assert a.step(clock.now) is False and isinstance(a.last_error, LeaseConflict)
    assert b.is_leader(clock.now)
    assert leases.record is not None and (leases.record.holder, leases.record.transitions) == ("b", 1)
    assert a.step(clock.now) is False and a.holder == "b"


# --- releasing -----------------------------------------------------------------------------------------


def test_release_hands_over_at_once(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    a.step(clock.now)
    b.step(clock.now)
    clock.advance(1)

    assert a.release(clock.now) is True

    assert not a.is_leader(clock.now) and a.leading_until() is None
    assert leases.record == LeaseRecord("", 1, EPOCH + clock.now, EPOCH + clock.now, 0, "2")
    assert b.step(clock.now) is True  # no waiting for the lease to expire
    assert leases.record is not None and (leases.record.holder, leases.record.transitions) == ("b", 1)


def test_release_without_holding_or_after_a_takeover_changes_nothing(leases: Leases, clock: FakeClock) -> None:
    a, view = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    assert a.release(clock.now) is False and leases.record is None

    a.step(clock.now)
    b.step(clock.now)
    view.down = True
    clock.advance(D)
    b.step(clock.now)  # a lapsed, b took over; a still believes the Lease names it
    view.down = False
    assert a.release(clock.now) is False
    assert isinstance(a.last_error, LeaseConflict)
    assert leases.record is not None and leases.record.holder == "b"


def test_transitions_count_changes_of_holder(leases: Leases, clock: FakeClock) -> None:
    a, _ = candidate(leases, clock, "a")
    b, _ = candidate(leases, clock, "b")
    a.step(clock.now)  # created: 0
    for _ in range(3):
        clock.advance(P)
        a.step(clock.now)  # renewals: still 0
    b.step(clock.now)
    clock.advance(D)
    b.step(clock.now)  # takeover: 1
    b.release(clock.now)  # release keeps the count
    a.step(clock.now)  # takeover of a released lease: 2

    assert [w.transitions for w in leases.writes] == [0, 0, 0, 0, 1, 1, 2]
    assert [w.holder for w in leases.writes] == ["a", "a", "a", "a", "b", "", "a"]


# --- never two leaders: random interleavings ------------------------------------------------------------

IDS = ("a", "b", "c")
# (lease duration, renew deadline, retry period): client-go's defaults, the service tests', a margin of
# 1 ms between deadline and expiry, and a fractional duration (written as 2 s) with a deadline above 1 s
TIMINGS = [(15.0, 10.0, 2.0), (1.0, 0.7, 0.2), (2.0, 1.999, 1.0), (1.5, 1.2, 0.2)]
Op = tuple[str, float]


@dataclass(frozen=True)
class Scenario:
    timing: tuple[float, float, float]
    offsets: tuple[float, ...]  # each candidate's clock is the true time plus its offset
    latencies: tuple[float, ...]  # how long each candidate's requests, and then their answers, take
    watched: tuple[bool, ...]  # each write by this candidate is seen by the others as soon as it is applied
    ops: list[Op]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    timing = draw(st.sampled_from(TIMINGS))
    lease, renew, retry = timing
    eps = 0.001
    # clock advances around every boundary of the algorithm: retry, renew deadline, lease duration
    advances = sorted({0.0, eps, retry / 2, retry, renew - retry, renew - eps, renew, lease - renew, lease - eps,
                       lease, lease + eps, 2 * lease})  # fmt: skip
    who = st.integers(0, len(IDS) - 1)
    step = st.tuples(st.just("step"), who)
    advance = st.tuples(st.just("advance"), st.sampled_from(advances))
    fault = st.tuples(st.sampled_from(["down", "up", "lose", "answer"]), who)
    other = st.tuples(st.sampled_from(["release", "touch"]), who)
    ops = draw(st.lists(st.one_of(step, step, step, advance, advance, advance, fault, other), max_size=60))
    n = len(IDS)
    offsets = draw(st.lists(st.sampled_from([-1e6, -30.0, 0.0, 7.5, 1e6]), min_size=n, max_size=n))
    latency = st.sampled_from([0.0, 0.0, eps, retry / 2, renew / 2, renew, lease])
    latencies = draw(st.lists(latency, min_size=n, max_size=n))
    watched = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Scenario(timing, tuple(offsets), tuple(latencies), tuple(watched), ops)


class OffsetClock:
    """A candidate's own clock: the true time plus a fixed offset (clocks differ, but run at one rate)."""

    def __init__(self, true: FakeClock, offset: float) -> None:
        self.true, self.offset = true, offset

    def __call__(self) -> float:
        return self.true.now + self.offset


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_never_two_leaders(scenario: Scenario) -> None:
    """At every point: at most one leader; the leader is the holder; and the margin that makes it so.

    The margin: whoever has seen the Lease's current version expires it, by its own clock, no earlier
    than the holder's leadership lapses. A "watched" candidate's writes are seen by every other candidate
    the moment they are applied, before the (maybe slow, maybe lost) answer gets back to the writer.
    """
    timing, offsets, ops = scenario.timing, scenario.offsets, scenario.ops
    true = FakeClock(1000.0)
    leases = Leases()
    clocks = [OffsetClock(true, off) for off in offsets]
    views = [View(leases, true, latency=lag, reply_latency=lag) for lag in scenario.latencies]
    electors = [
        LeaderElector(view, ident, *timing, clock=own, wall_clock=lambda: EPOCH + true.now)
        for view, ident, own in zip(views, IDS, clocks, strict=True)
    ]
    nested = [False]

    def others_look(i: int) -> Callable[[], None]:
        def look() -> None:
            if nested[0]:
                return
            nested[0] = True
            try:
                for j, elector in enumerate(electors):
                    if j != i:
                        elector.step(clocks[j]())
            finally:
                nested[0] = False

        return look

    for i, view in enumerate(views):
        view.on_commit = others_look(i) if scenario.watched[i] else None

    def true_time(i: int, reading: float | None) -> float:
        return -float("inf") if reading is None else reading - offsets[i]

    def check() -> None:
        leaders = [i for i, e in enumerate(electors) if e.is_leader(clocks[i]())]
        assert len(leaders) <= 1, f"{[IDS[i] for i in leaders]} lead together at {true.now}"
        for i in leaders:
            assert leases.record is not None and leases.record.holder == IDS[i]
            lapse = true_time(i, electors[i].leading_until())
            for j, other in enumerate(electors):
                seen = other.observed
                if j != i and seen is not None and seen.resource_version == leases.record.resource_version:
                    expires = true_time(j, other.lease_expires_at())
                    assert expires > lapse, f"{IDS[j]} may take over at {expires}, {IDS[i]} leads until {lapse}"

    for op, arg in ops:
        i = int(arg)
        if op == "step":
            started = true.now
            if electors[i].step(clocks[i]()):
                # whoever wins, wins only after every other leadership has run out (in true time)
                for j, other in enumerate(electors):
                    until = true_time(j, other.leading_until())
                    assert j == i or until <= started, f"{IDS[i]} won while {IDS[j]} still led"
        elif op == "advance":
            true.advance(arg)
        elif op == "release":
            electors[i].release(clocks[i]())
        elif op == "touch":
            if leases.record is not None:
                leases.touch()
        else:
            view = views[i]
            view.down = {"down": True, "up": False}.get(op, view.down)
            view.lose_replies = {"lose": True, "answer": False}.get(op, view.lose_replies)
        check()


# --- the thread runner ---------------------------------------------------------------------------------


class Changes:
    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.event = threading.Event()

    def __call__(self, leading: bool) -> None:
        self.seen.append(leading)
        self.event.set()

    def wait_for(self, value: bool, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.seen and self.seen[-1] is value):
            assert time.monotonic() < deadline, f"no on_change({value}) within {timeout}s: {self.seen}"
            self.event.wait(0.01)
            self.event.clear()


def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for ``check`` (the runner's thread may be slow to get a core on a busy machine)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout}s"
        time.sleep(0.01)


def real(leases: Leases, identity: str, lease: float, renew: float, retry: float) -> tuple[LeaderElector, View]:
    view = View(leases, FakeClock())  # latency stays 0: the fake clock is not the one the runner reads
    return LeaderElector(view, identity, lease, renew, retry), view


def test_runner_leads_reports_and_releases_on_stop() -> None:
    leases = Leases()
    elector, _ = real(leases, "a", 3.0, 2.0, 0.05)
    changes = Changes()
    runner = LeaderElection(elector, changes)
    runner.start()
    changes.wait_for(True)
    assert runner.is_leader()
    until(lambda: len(leases.writes) >= 3)  # renewing every retry period

    runner.stop()

    assert changes.seen == [True, False] and not runner.is_leader()
    assert leases.record is not None and leases.record.holder == ""


def test_runner_stops_promptly_even_with_a_long_retry_period() -> None:
    leases = Leases()
    elector, _ = real(leases, "a", 120.0, 90.0, 60.0)
    changes = Changes()
    runner = LeaderElection(elector, changes)
    runner.start()
    changes.wait_for(True)

    started = time.monotonic()
    runner.stop(release=False)

    assert time.monotonic() - started < 5.0  # not the 60 s retry period (5 s for a loaded machine)
    assert changes.seen == [True, False]
    assert leases.record is not None and leases.record.holder == "a"  # not released: it will expire


def test_runner_reports_the_lapse_at_the_deadline_when_the_api_is_gone() -> None:
    """Acquired at t0, the API gone at t0 + 0.1: the renewal at t0 + 3.5 fails and the lapse is due at the
    renew deadline, t0 + 4, about 3.9 s after the cut; a runner that only looked again at its next attempt
    would report it at t0 + 7, about 6.9 s after. The bound between them leaves 2 s for a loaded machine
    (the suite beside the closed loop on two cores) to wake the runner's thread and this one."""
    leases = Leases()
    elector, view = real(leases, "a", 8.0, 4.0, 3.5)
    changes = Changes()
    runner = LeaderElection(elector, changes)
    runner.start()
    changes.wait_for(True)
    time.sleep(0.1)
    view.down = True
    cut = time.monotonic()

    changes.wait_for(False, timeout=10.0)
    lapsed = time.monotonic() - cut
    assert lapsed <= 4.0 + 2.0, lapsed  # at most renew_deadline after the last renewal, not a retry later
    assert not runner.is_leader()
    view.down = False
    changes.wait_for(True, timeout=10.0)  # still named in the Lease: it takes it back at its next attempt
    runner.stop()


def test_two_runners_one_leader_and_a_handover_on_stop() -> None:
    leases = Leases()
    changes = {ident: Changes() for ident in ("a", "b")}
    # a 6 s lease: without the release the other would wait for it to expire, 6 s after the last renewal
    runners = {ident: LeaderElection(real(leases, ident, 6.0, 4.5, 0.05)[0], changes[ident]) for ident in ("a", "b")}
    for runner in runners.values():
        runner.start()
    until(lambda: any(r.is_leader() for r in runners.values()))
    time.sleep(0.3)
    leaders = [ident for ident, r in runners.items() if r.is_leader()]
    assert len(leaders) == 1
    [leader] = leaders
    [other] = {"a", "b"} - {leader}

    started = time.monotonic()
    runners[leader].stop()
    changes[other].wait_for(True, timeout=10.0)

    # released: taken at the other's next attempt (0.05 s), not at the lease's expiry (6 s); 4 s leaves the
    # margin a loaded machine needs
    assert time.monotonic() - started < 4.0
    assert changes[leader].seen == [True, False]
    runners[other].stop()


def test_a_failing_callback_does_not_stop_the_election() -> None:
    leases = Leases()
    elector, _ = real(leases, "a", 3.0, 2.0, 0.05)
    calls: list[bool] = []

    def on_change(leading: bool) -> None:
        calls.append(leading)
        raise RuntimeError("boom")

    runner = LeaderElection(elector, on_change)
    runner.start()
    until(lambda: bool(calls))
    until(lambda: len(leases.writes) >= 3)
    assert runner.is_leader()
    runner.stop()
    assert calls == [True, False]


def test_on_change_may_stop_the_election_itself() -> None:
    leases = Leases()
    elector, _ = real(leases, "a", 3.0, 2.0, 0.05)
    calls: list[bool] = []
    done = threading.Event()

    def on_change(leading: bool) -> None:
        calls.append(leading)
        if leading:
            runner.stop()  # e.g. the service decides to shut down as soon as it leads
            done.set()

    runner = LeaderElection(elector, on_change)
    runner.start()

    assert done.wait(5)
    assert calls == [True, False] and not runner.is_leader()
    assert leases.record is not None and leases.record.holder == ""
    runner.stop()  # again, from outside: nothing more happens
    assert calls == [True, False]
