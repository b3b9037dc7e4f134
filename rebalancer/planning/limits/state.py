"""What the limiters must remember across runs and instances, and its strict JSON form.

The state lives in the cluster (a ConfigMap written with optimistic concurrency by the adapter); this
module only turns it into text and back. Decoding is strict: anything that is not exactly this schema and
version raises :class:`StateCorrupt` naming the problem, so the caller reports it and writes
:meth:`LimiterState.replacement` instead of trusting it. :data:`LIMITER_STATE` is its kind for the
document store (:mod:`rebalancer.domain.documents`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

import msgspec

from rebalancer.domain.documents import DocumentKind
from rebalancer.domain.errors import DocumentCorrupt
from rebalancer.domain.versioned_json import decode_versioned

SCHEMA = "rebalancer.io/limiter-state"
VERSION = 1
MAX_FUTURE_SECONDS = 3600.0
"""A time more than this after ``now`` is not clock skew: the state is corrupt (or the writer's clock is
broken) and would block evictions until that time."""

CLOCK_SKEW_SECONDS = 300.0
"""How far behind another instance's clock may be: pruning keeps what a clock this much slower still
counts (records pruned at a faster clock and stored would otherwise let it exceed a cap)."""

_WORKLOAD_KEY = re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+$")
_BUCKET_KEY = re.compile(r"^(global|pool/\S+)$")


class StateCorrupt(DocumentCorrupt):
    """The stored limiter state cannot be trusted; ``problem`` says why."""

    what = "limiter state"


class Reservation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One eviction decided at ``at`` (epoch seconds); it counts in every sliding window it falls in."""

    at: float
    pool: str
    node: str
    workload: str | None  # "Kind/namespace/name", None for a pod without a controller
    namespace: str
    pod: str


class Bucket(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A token bucket's level as of ``updated_at``; it refills from there at the configured rate."""

    level: float
    updated_at: float


class LimiterState(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """Reservations within the longest window, token buckets per scope (``global``, ``pool/<name>``),
    and the last eviction time per node (cooldown) and per workload (minInterval). Never mutated: the
    engine returns a new state."""

    reservations: tuple[Reservation, ...] = ()
    buckets: Mapping[str, Bucket] = msgspec.field(default_factory=dict)
    node_last_eviction: Mapping[str, float] = msgspec.field(default_factory=dict)
    workload_last_eviction: Mapping[str, float] = msgspec.field(default_factory=dict)
    recovering_until: float | None = None  # set after corrupt state: nothing is evicted before this time

    @classmethod
    def replacement(cls, now: float, bucket_scopes: Iterable[str], horizon: float) -> LimiterState:
        """What to store after :class:`StateCorrupt`: nothing is known about past evictions, so no
        eviction may happen until every window (``LimitSettings.horizon_seconds``) has passed since
        ``now`` (the evictions it forgot could fill any cap), and then every token bucket
        (``LimitSettings.bucket_scopes()``) starts empty. Deleting the state ConfigMap instead is the
        operator's explicit choice to start afresh."""
        return cls(
            buckets={scope: Bucket(0.0, now) for scope in sorted(bucket_scopes)},
            recovering_until=now + horizon if horizon > 0 else None,
        )

    def prune(self, now: float, horizon: float, period_horizon: float | None = None) -> LimiterState:
        """Drop what no window reaches any more, even on a clock :data:`CLOCK_SKEW_SECONDS` behind ``now``:
        records at or before ``now - CLOCK_SKEW_SECONDS - horizon`` (use ``LimitSettings.horizon_seconds``).
        Token buckets are kept (one per configured scope)."""
        slowest = now - CLOCK_SKEW_SECONDS
        cutoff = slowest - horizon
        # reservations only serve sliding windows: keep them for the longest window, not for cooldowns
        kept_from = slowest - (horizon if period_horizon is None else period_horizon)
        return LimiterState(
            reservations=tuple(r for r in self.reservations if r.at > kept_from),
            buckets=self.buckets,
            node_last_eviction={k: t for k, t in self.node_last_eviction.items() if t > cutoff},
            workload_last_eviction={k: t for k, t in self.workload_last_eviction.items() if t > cutoff},
            recovering_until=self.recovering_until if (self.recovering_until or 0) > slowest else None,
        )

    def to_json(self) -> str:
        doc = _Document(
            schema=SCHEMA,
            version=VERSION,
            reservations=tuple(sorted(self.reservations, key=_reservation_order)),
            buckets=dict(self.buckets),
            node_last_eviction=dict(self.node_last_eviction),
            workload_last_eviction=dict(self.workload_last_eviction),
            recovering_until=self.recovering_until,
        )
        return msgspec.json.encode(doc, order="deterministic").decode()

    @classmethod
    def from_json(cls, text: str | bytes, now: float) -> LimiterState:
        """Decode strictly; raise :class:`StateCorrupt` for anything else (foreign, older or newer schema,
        malformed JSON, wrong types, unknown fields, impossible values, times after ``now`` + 1 h)."""
        doc = decode_versioned(text, _Document, SCHEMA, VERSION, StateCorrupt, "limiter state")
        _check_values(doc, now)
        return cls(
            reservations=doc.reservations,
            buckets=doc.buckets,
            node_last_eviction=doc.node_last_eviction,
            workload_last_eviction=doc.workload_last_eviction,
            recovering_until=doc.recovering_until,
        )


MAX_STATE_BYTES = 900_000  # a ConfigMap holds 1 MiB in all
LIMITER_STATE = DocumentKind(
    "limiter state", LimiterState, LimiterState.from_json, LimiterState.to_json, MAX_STATE_BYTES
)


def _reservation_order(r: Reservation) -> tuple[float, str, str, str]:
    return (r.at, r.namespace, r.pod, r.node)


class _Document(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    schema: str
    version: int
    reservations: tuple[Reservation, ...]
    buckets: dict[str, Bucket]
    node_last_eviction: dict[str, float]
    workload_last_eviction: dict[str, float]
    recovering_until: float | None = None


MAX_RECOVERY_SECONDS = 31 * 86_400.0
MIN_BUCKET_LEVEL = -1.0  # a stored level below it blocked its scope for hours, unexplained: corrupt


def _check_values(doc: _Document, now: float) -> None:
    until = doc.recovering_until
    if until is not None and (not math.isfinite(until) or until < 0 or until > now + MAX_RECOVERY_SECONDS):
        raise StateCorrupt(f"$.recoveringUntil: {until!r} is not a time within 31 days of now")

    def time(value: float, where: str) -> None:
        if not math.isfinite(value) or value < 0:
            raise StateCorrupt(f"{where}: {value!r} is not a time")
        if value > now + MAX_FUTURE_SECONDS:
            raise StateCorrupt(f"{where}: {value} is {value - now:.0f} s after now (clock broken or corrupt)")

    for i, r in enumerate(doc.reservations):
        where = f"$.reservations[{i}]"
        time(r.at, f"{where}.at")
        for name in ("node", "namespace", "pod"):  # a pool may be "" (a node's pool label may be empty)
            if not getattr(r, name):
                raise StateCorrupt(f"{where}.{name} is empty")
        if r.workload is not None and not _WORKLOAD_KEY.match(r.workload):
            raise StateCorrupt(f"{where}.workload: {r.workload!r} is not Kind/namespace/name")
    for key, bucket in doc.buckets.items():
        where = f"$.buckets[{key!r}]"
        if not _BUCKET_KEY.match(key):
            raise StateCorrupt(f"{where}: unknown scope (expected global or pool/<name>)")
        if not math.isfinite(bucket.level):
            raise StateCorrupt(f"{where}.level: {bucket.level!r} is not a number")
        if bucket.level < MIN_BUCKET_LEVEL:  # a reservation takes a token from a level of 1 or more
            raise StateCorrupt(
                f"{where}.level: {bucket.level!r} is below {MIN_BUCKET_LEVEL:g}, which no reservation leaves"
            )
        time(bucket.updated_at, f"{where}.updatedAt")
    for node, at in doc.node_last_eviction.items():
        if not node:
            raise StateCorrupt("$.nodeLastEviction: empty node name")
        time(at, f"$.nodeLastEviction[{node!r}]")
    for workload, at in doc.workload_last_eviction.items():
        if not _WORKLOAD_KEY.match(workload):
            raise StateCorrupt(f"$.workloadLastEviction: {workload!r} is not Kind/namespace/name")
        time(at, f"$.workloadLastEviction[{workload!r}]")
