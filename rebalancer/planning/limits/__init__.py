"""Limiters for evictions: caps, token buckets, time windows, lists and service levels (pure).

``state`` is what persists across runs, ``engine`` the decisions; the policy's ``limits:`` section is
``rebalancer.domain.settings.limits``. Nothing here performs I/O or reads a clock: ``now`` (epoch seconds) is an argument.
"""

from rebalancer.domain.settings.limits import LimitSettings
from rebalancer.planning.limits.engine import admit, check, release, reserve
from rebalancer.planning.limits.request import ALLOWED, CycleCounts, EvictionRequest, ReplicaCounts, Verdict
from rebalancer.planning.limits.state import LIMITER_STATE, MAX_STATE_BYTES, LimiterState, StateCorrupt

__all__ = [
    "ALLOWED",
    "LIMITER_STATE",
    "MAX_STATE_BYTES",
    "CycleCounts",
    "EvictionRequest",
    "LimitSettings",
    "LimiterState",
    "ReplicaCounts",
    "StateCorrupt",
    "Verdict",
    "admit",
    "check",
    "release",
    "reserve",
]
