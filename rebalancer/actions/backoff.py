"""Per-pod backoff after a disruption budget refused an eviction (HTTP 429), persisted across runs.

Advisory, unlike the limiter state: losing it can only cause an early retry, which the API server
refuses again. Kept in its own small ConfigMap so that it never contends with the caps' state.
:data:`EVICTION_BACKOFF` is its kind for the document store (:mod:`rebalancer.domain.documents`).
"""

from __future__ import annotations

import msgspec

from rebalancer.domain.documents import DocumentKind
from rebalancer.domain.errors import DocumentCorrupt
from rebalancer.domain.versioned_json import decode_versioned

SCHEMA = "rebalancer.io/eviction-backoff"
VERSION = 1
BASE_SECONDS = 60.0
MAX_SECONDS = 3600.0


class BackoffCorrupt(DocumentCorrupt):
    """Unreadable backoff: the caller starts afresh (it is advisory)."""

    what = "eviction backoff state"


class PodBackoff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    until: float
    attempts: int


class _Document(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: str
    version: int
    pods: dict[str, PodBackoff]


class BackoffState(msgspec.Struct, frozen=True):
    pods: dict[str, PodBackoff] = msgspec.field(default_factory=dict)

    def blocked_until(self, key: str, now: float) -> float | None:
        entry = self.pods.get(key)
        return entry.until if entry is not None and entry.until > now else None

    def after_rejection(self, key: str, now: float, retry_after: float | None) -> BackoffState:
        """Exponential backoff (60 s doubling up to an hour), never shorter than the server's Retry-After."""
        attempts = self.pods[key].attempts + 1 if key in self.pods else 1
        wait = min(MAX_SECONDS, BASE_SECONDS * 2 ** (attempts - 1))
        wait = max(wait, retry_after or 0.0)
        return BackoffState({**self.pods, key: PodBackoff(now + wait, attempts)})

    def cleared(self, key: str) -> BackoffState:
        return BackoffState({k: v for k, v in self.pods.items() if k != key}) if key in self.pods else self

    def pruned(self, now: float) -> BackoffState:
        """Entries whose wait ended a day ago are forgotten (their attempt count restarts)."""
        return BackoffState({k: v for k, v in self.pods.items() if v.until > now - 86_400})

    def to_json(self) -> str:
        return msgspec.json.encode(_Document(SCHEMA, VERSION, self.pods), order="deterministic").decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> BackoffState:
        """Strict; anything else raises :class:`BackoffCorrupt`, a ValueError."""
        return cls(
            dict(decode_versioned(text, _Document, SCHEMA, VERSION, BackoffCorrupt, "eviction backoff state").pods)
        )


EVICTION_BACKOFF = DocumentKind(
    "eviction backoff state", BackoffState, lambda text, now: BackoffState.from_json(text), BackoffState.to_json
)
