"""Instants as the program shows them."""

from __future__ import annotations

from datetime import UTC, datetime

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(epoch: float) -> str:
    """``epoch`` (seconds) in UTC to the second, as Kubernetes writes times: ``2026-11-29T22:13:20Z``."""
    return datetime.fromtimestamp(int(epoch), UTC).strftime(RFC3339)
