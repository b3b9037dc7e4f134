"""The project's one error tree.

Adapters translate library exceptions into these (``raise ... from exc``) so that no
``kubernetes`` or ``requests`` exception leaks past ``rebalancer.kube`` / ``rebalancer.prom``.
"""

from __future__ import annotations


class RebalancerError(Exception):
    """Base of every error raised on purpose by rebalancer."""


class ConfigError(RebalancerError):
    """The policy (or another configuration input) is invalid.

    ``problems`` holds one ``(field.path, message)`` pair per problem.
    """

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: {path}: {message}" if path else f"{source}: {message}" for path, message in problems]
        super().__init__("\n".join(lines))


class SourceError(RebalancerError):
    """A data source (Kubernetes API, Prometheus) failed; no eviction may follow from this cycle."""


class KubeUnavailable(SourceError):
    """The Kubernetes API could not be reached or answered with an error."""

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class KubeForbidden(KubeUnavailable):
    """The API server refused a request for lack of RBAC permission."""


class MetricsUnavailable(SourceError):
    """Prometheus could not be reached, timed out or answered with an HTTP error."""


class MetricsMalformed(SourceError):
    """Prometheus answered, but the answer cannot be trusted (wrong type, NaN, bad labels)."""


class MetricsStale(SourceError):
    """Prometheus answered with data older than the configured maximum age."""
