"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's ``tools/leaderelection`` does it.

Only the leader evicts; any number of replicas run :class:`LeaderElection`, and at most one of them leads
at any time. The algorithm is client-go's ``tryAcquireOrRenew`` (one attempt per :meth:`LeaderElector.step`):

- **Acquire** when there is no Lease (create it), when its ``holderIdentity`` is empty (released), when it
  names us, or when it has expired. Every write carries the ``resourceVersion`` that was read, so of two
  candidates racing for the same Lease exactly one wins; the other gets :class:`LeaseConflict` and reads
  again on its next step.
- **Expired** is judged on the local clock only, never on the ``renewTime`` written by another host (clocks
  differ): a Lease expires ``leaseDurationSeconds`` (as written in it) after this candidate *first saw its
  current version*. Every renewal writes a new version, so a live leader keeps pushing that moment out. A
  candidate that starts beside a Lease last renewed long ago therefore waits one full lease duration first.
- **Renew** while leading, every ``retry_period``, through the fast path: an update carrying the version we
  wrote last, without reading first; a conflict falls back to reading (the slow path) in the same step.
- **Renew deadline**: leadership lasts ``renew_deadline`` after the start of the last successful write.
  Past that, :meth:`LeaderElector.is_leader` answers False whatever happens next, even if the API server
  is unreachable and nothing new can be learnt. Since ``renew_deadline < lease_duration`` and every other
  candidate measures the lease from a moment after that write reached the server, the old leader has
  stopped leading before anyone else may take over (clocks may be offset, but must run at about the same
  rate: the ratio ``lease_duration / renew_deadline`` is the drift tolerated).
- **Release** on shutdown: the Lease is written with an empty ``holderIdentity`` and a one-second
  duration, so another candidate takes over at its next step instead of waiting for the lease to expire.
- ``leaseTransitions`` counts the changes of holder; ``acquireTime`` is kept across renewals.

Differences from client-go, all on the safe side: the written ``leaseDurationSeconds`` is rounded *up* to
whole seconds (client-go truncates, so 1.5 s would become 1 s, shorter than this process believes); a Lease
without a positive duration is held for our own ``lease_duration`` (client-go: expired at once); any new
``resourceVersion`` counts as a renewal (client-go compares the record's bytes); the renew deadline is
measured from the last successful renewal (client-go: from the start of a renew round, up to one retry
period later); attempts are not jittered. Deleting the Lease by hand while a leader holds it is outside the
guarantee (as in client-go): the leader learns of it at its next renewal.

This module is pure: the Lease itself is reached through a :class:`LeaseStore` (``rebalancer.adapters.kube.lease``
in production, an in-memory double in tests), and time comes from injected clocks.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rebalancer.domain.errors import ConfigError, LeaseConflict, SourceError

log = logging.getLogger(__name__)

Clock = Callable[[], float]

RELEASED_DURATION = 1
"""``leaseDurationSeconds`` of a released Lease (client-go writes 1 too)."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader-election fields of a Lease's spec; times are epoch seconds (the wire has MicroTime).

    ``holder`` is ``holderIdentity`` ("" when absent or released), ``duration`` is
    ``leaseDurationSeconds`` (None when absent), ``transitions`` is ``leaseTransitions``.
    ``resource_version`` is the Lease's ``metadata.resourceVersion`` as read (ignored when writing).
    """

    holder: str = ""
    duration: int | None = None
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0
    resource_version: str = ""


class LeaseStore(Protocol):
    """One Lease, read and written with optimistic concurrency.

    Each method raises :class:`LeaseConflict` when the Lease changed (or was created) since
    ``resource_version`` was read, and another :class:`SourceError` when the API cannot be used.
    """

    def get(self) -> LeaseRecord | None:
        """The Lease as stored now; None when there is none."""

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease with ``record``; returns it as stored (with its resourceVersion)."""

    def update(self, record: LeaseRecord, resource_version: str) -> LeaseRecord:
        """Replace the Lease's fields with ``record`` if it is still at ``resource_version``."""


class LeaderElector:
    """One candidate: :meth:`step` makes one attempt to acquire or renew; nothing here sleeps or spawns.

    ``clock`` is a monotonic clock (seconds) for every decision; ``wall_clock`` (epoch seconds) only dates
    the ``acquireTime`` / ``renewTime`` written for people and other tools. The ``now`` passed to
    :meth:`step`, :meth:`is_leader` and :meth:`release` is a reading of ``clock``. One thread steps an
    elector; :meth:`is_leader` and :meth:`leading_until` may be called from any thread.
    """

    def __init__(
        self,
        client: LeaseStore,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
    ) -> None:
        problems: list[tuple[str, str]] = []
        if not identity:
            problems.append(("identity", "must not be empty"))
        if not 0 < retry_period < renew_deadline < lease_duration:
            problems.append(
                ("renewDeadline", "need 0 < retryPeriod < renewDeadline < leaseDuration "
                 f"(got {retry_period:g}, {renew_deadline:g}, {lease_duration:g})")
            )  # fmt: skip
        if problems:
            raise ConfigError("leader election", problems)
        self._store = client
        self.identity = identity
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.clock = clock
        self._wall_clock = wall_clock
        self._written_duration = max(1, math.ceil(lease_duration))
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # clock reading when the observed version was first seen
        self._current = False  # the observed version is the stored one, as far as we know (fast path)
        # The one value other threads read: until when (clock) we lead; None: we do not. A single
        # attribute, so a reader never sees half an update.
        self._lead_until: float | None = None
        self.last_error: SourceError | None = None
        """The failure of the last :meth:`step` or :meth:`release`, None when it reached the API."""

    # --- queries -----------------------------------------------------------------------------

    def is_leader(self, now: float) -> bool:
        """Whether we lead at ``now``: we hold the Lease and renewed it less than ``renew_deadline`` ago."""
        until = self._lead_until
        return until is not None and now < until

    def leading_until(self) -> float | None:
        """The clock reading at which our leadership lapses unless renewed; None when we do not lead."""
        return self._lead_until

    def lease_expires_at(self) -> float | None:
        """When (a ``clock`` reading) the observed version of the Lease expires for this candidate.

        That is its ``leaseDurationSeconds`` (our own lease duration when it has none) after we first saw
        that version; a newer version seen later moves it on. None before the first contact.
        """
        observed = self._observed
        if observed is None:
            return None
        duration = observed.duration
        held_for = float(duration) if duration is not None and duration > 0 else self.lease_duration
        return self._observed_at + held_for

    @property
    def observed(self) -> LeaseRecord | None:
        """The Lease as last read or written by this candidate (None before the first contact)."""
        return self._observed

    @property
    def holder(self) -> str:
        """The holder last observed ("" for none): the leader, for information (logs, metrics)."""
        return self._observed.holder if self._observed is not None else ""

    # --- one attempt ---------------------------------------------------------------------------

    def step(self, now: float) -> bool:
        """One attempt to acquire or renew the Lease at ``now``; returns whether we lead afterwards.

        API failures are not raised: they are kept in :attr:`last_error` and leadership simply runs out
        at its deadline. A conflict means another candidate wrote: the next step reads the Lease again.
        """
        try:
            self._acquire_or_renew(now)
        except LeaseConflict as exc:
            self._current = False
            self.last_error = exc
        except SourceError as exc:
            self.last_error = exc
        else:
            self.last_error = None
        return self.is_leader(max(now, self.clock()))

    def _acquire_or_renew(self, now: float) -> None:
        observed = self._observed
        # 1. Fast path: we hold it and nobody else can have taken it: update without reading first.
        if observed is not None and observed.holder == self.identity and self._current and self._valid(now):
            try:
                self._won(self._store.update(self._claim(now, observed), observed.resource_version), now)
                return
            except LeaseConflict:
                self._current = False  # somebody wrote: read it (the slow path)
        # 2. Read it; none yet: create it.
        current = self._store.get()
        if current is None:
            self._won(self._store.create(self._claim(now, None)), now)
            return
        self._observe(current)
        # 3. Held by another and not expired (by our own clock): leave it.
        if current.holder and current.holder != self.identity and self._valid(now):
            return
        # 4. Free, expired or ours: take it, on condition that nobody wrote since we read it.
        self._won(self._store.update(self._claim(now, current), current.resource_version), now)

    def _claim(self, now: float, base: LeaseRecord | None) -> LeaseRecord:
        """The record we write: a renewal keeps acquireTime and the count; a takeover counts one more."""
        at = self._epoch(now)
        if base is None:
            return LeaseRecord(self.identity, self._written_duration, at, at, 0)
        if base.holder == self.identity:
            acquired = base.acquire_time if base.acquire_time is not None else at
            return LeaseRecord(self.identity, self._written_duration, acquired, at, base.transitions)
        return LeaseRecord(self.identity, self._written_duration, at, at, base.transitions + 1)

    def _observe(self, record: LeaseRecord) -> None:
        """Note what was read; a new version restarts its lease on our clock (client-go's observedTime)."""
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        self._current = True
        if record.holder != self.identity:
            self._lead_until = None

    def _won(self, stored: LeaseRecord, now: float) -> None:
        """Our write went through at (or after) ``now``: we lead until ``now + renew_deadline``."""
        self._observed, self._observed_at, self._current = stored, self.clock(), True
        self._lead_until = now + self.renew_deadline

    def _valid(self, now: float) -> bool:
        """Whether the observed Lease is still held at ``now``, measured from when we saw its version."""
        expires = self.lease_expires_at()
        return expires is not None and expires > now

    def _epoch(self, now: float) -> float:
        """``now`` (a ``clock`` reading) as epoch seconds, for the times written into the Lease."""
        return self._wall_clock() + (now - self.clock())

    # --- shutdown ------------------------------------------------------------------------------

    def release(self, now: float) -> bool:
        """Stop leading at once and hand the Lease over: another candidate may take it at its next step.

        Call it only once nothing guarded by the Lease is running any more. Returns whether the Lease
        was released; False when we did not hold it, when somebody else wrote it meanwhile (a conflict:
        it is not ours to release), or when the API failed (then :attr:`last_error` says why and the
        Lease simply expires).
        """
        self._lead_until = None
        observed = self._observed
        if observed is None or observed.holder != self.identity:
            return False
        at = self._epoch(now)
        released = LeaseRecord("", RELEASED_DURATION, at, at, observed.transitions)
        try:
            stored = self._store.update(released, observed.resource_version)
        except LeaseConflict as exc:
            self._current, self.last_error = False, exc
            return False
        except SourceError as exc:
            self.last_error = exc
            return False
        self.last_error = None
        self._observed, self._observed_at, self._current = stored, self.clock(), True
        return True


class LeaderElection:
    """Runs a :class:`LeaderElector` on a thread: one step every ``retry_period``.

    ``on_change(True)`` is called when this instance starts leading, ``on_change(False)`` when it stops
    (renewal failed past the deadline, another holder observed, or :meth:`stop`). It is called from the
    election thread (from the caller's thread in :meth:`stop`); it should return quickly. When leading, the
    thread also wakes up at the renew deadline, so a lapse is reported on time even between attempts.
    :meth:`is_leader` is evaluated on the clock at each call: right before acting, ask it.
    A step blocked in a request delays notifications, not :meth:`is_leader`: give the Lease client a
    request timeout shorter than ``retry_period``.
    """

    def __init__(self, elector: LeaderElector, on_change: Callable[[bool], None], *, name: str = "leader-election"):
        self._elector = elector
        self._on_change = on_change
        self._name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._notify_lock = threading.RLock()  # on_change may call stop()
        self._reported = False
        self._stopped = False

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("leader election already started")
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """Whether this instance leads now (False once stopped)."""
        return not self._stopped and self._elector.is_leader(self._elector.clock())

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop stepping (a request in flight is waited for, up to ``timeout``), report False, then release.

        Call it once the work guarded by the Lease has finished: with ``release`` the Lease is handed
        over at once, and another instance may start acting right after.
        """
        self._stopping.set()
        thread = self._thread
        own = thread is threading.current_thread()  # called from on_change: no request is in flight
        if thread is not None and not own:
            thread.join(timeout)
        still_running = thread is not None and not own and thread.is_alive()
        self._notify(False, final=True)
        if not release:
            return
        if still_running:  # the elector is not ours to use while its thread is inside a request
            log.warning("leader election: %s: a request is still in flight, the Lease is left to expire", self._who)
            return
        if self._elector.release(self._elector.clock()):
            log.info("leader election: %s released the Lease", self._who)
        elif self._elector.last_error is not None:
            log.warning("leader election: %s could not release the Lease: %s", self._who, self._elector.last_error)

    @property
    def _who(self) -> str:
        return self._elector.identity

    def _run(self) -> None:
        elector = self._elector
        while not self._stopping.is_set():
            try:
                leading = elector.step(elector.clock())
            except Exception:  # a defect, not an API failure: keep electing, leadership runs out on its own
                log.exception("leader election: %s: attempt failed", self._who)
                leading = elector.is_leader(elector.clock())
            else:
                if elector.last_error is not None:
                    log.warning("leader election: %s: %s", self._who, elector.last_error)
            self._notify(leading)
            wait = elector.retry_period
            until = elector.leading_until()
            if leading and until is not None:
                wait = min(wait, max(0.0, until - elector.clock()))
            if self._stopping.wait(wait):
                break
            self._notify(elector.is_leader(elector.clock()))  # a lapse is reported before the next attempt

    def _notify(self, leading: bool, *, final: bool = False) -> None:
        with self._notify_lock:
            if self._stopped or leading == self._reported:
                self._stopped = self._stopped or final
                return
            self._reported = leading
            self._stopped = final
            if leading:
                log.info("leader election: %s is now the leader", self._who)
            else:
                log.info("leader election: %s is no longer the leader", self._who)
            try:
                self._on_change(leading)
            except Exception:
                log.exception("leader election: on_change(%s) failed", leading)
