"""The project's one error tree.

Adapters translate library exceptions into these (``raise ... from exc``) so that no
``kubernetes`` or ``requests`` exception leaks past ``rebalancer.adapters.kube`` / ``rebalancer.adapters.prom``.
"""

from __future__ import annotations

from rebalancer.domain.redaction import redact


class RebalancerError(Exception):
    """Base of every error raised on purpose by rebalancer. Its message is redacted (no credential of a URL
    in it, see :func:`~rebalancer.domain.redaction.redact`): a message quoting a library's error that
    embeds a URL is shown, logged or recorded as it is."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class TokenFileError(RebalancerError):
    """A token file (a mounted Secret) cannot be read or is empty."""


class ConfigError(RebalancerError):
    """The policy (or another configuration input) is invalid.

    ``problems`` holds one ``(field.path, message)`` pair per problem.
    """

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = [(path, redact(message)) for path, message in problems]
        lines = [f"{source}: {path}: {message}" if path else f"{source}: {message}" for path, message in self.problems]
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
    """The API server refused a request for lack of RBAC permission.

    ``verb``, ``resource`` (``pods/eviction``, ``configmaps``, ...), ``group`` and ``namespace`` name the
    permission to grant, when the adapter knows them.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 403,
        reason: str | None = "Forbidden",
        verb: str | None = None,
        resource: str | None = None,
        group: str = "",
        namespace: str | None = None,
    ) -> None:
        self.verb = verb
        self.resource = resource
        self.group = group
        self.namespace = namespace
        super().__init__(message, status=status, reason=reason)

    @classmethod
    def rbac(cls, verb: str, resource: str, namespace: str | None, group: str = "", detail: str = "") -> KubeForbidden:
        """The message names the missing verb and resource, e.g. for ``create`` on ``pods/eviction``:
        ``RBAC: the service account may not create pods/eviction in namespace shop (grant verb create on
        pods/eviction)``; ``detail`` (the API server's own message) follows.
        """
        what = f"{resource}.{group}" if group else resource
        where = f" in namespace {namespace}" if namespace else ""
        grant = f"grant verb {verb} on {resource}" + (f' in API group "{group}"' if group else "")
        message = f"RBAC: the service account may not {verb} {what}{where} ({grant})" + (
            f": {detail}" if detail else ""
        )
        return cls(message, verb=verb, resource=resource, group=group, namespace=namespace)


class StateConflict(SourceError):
    """The shared state (limiter ConfigMap) changed since it was read: reload, re-decide, then write again."""


class DocumentCorrupt(RebalancerError, ValueError):
    """A stored document (limiter state, eviction backoff, efficiency records) is not exactly its schema and
    version: ``problem`` names the field; ``where`` the ConfigMap and key it was read from, and ``version``
    that ConfigMap's resourceVersion (to write a replacement over it), when it was read from one. ``newer``:
    it is well formed for all this build knows, but written by a newer build (a later schema version), which
    a rollback or a rolling upgrade meets; it must be left as it is, never replaced."""

    what = "document"

    def __init__(
        self, problem: str, where: str | None = None, version: str | None = None, *, newer: bool = False
    ) -> None:
        self.problem, self.where, self.version, self.newer = problem, where, version, newer
        state = "written by a newer rebalancer" if newer else "corrupt"
        super().__init__(f"{self.what} {state}: {problem}" + (f" (in {where})" if where else ""))


class DocumentTooLarge(RebalancerError):
    """A document would not fit its ConfigMap: nothing was written."""

    def __init__(self, what: str, where: str, size: int, limit: int) -> None:
        self.size, self.limit = size, limit
        super().__init__(f"{what} would be {size} bytes, over {limit} (a ConfigMap holds 1 MiB) in {where}")


class LeaseConflict(SourceError):
    """The leader-election Lease changed since it was read (409): read it again before deciding anything."""


class EvictionError(RebalancerError):
    """One eviction was refused or failed; other pods may still be evicted.

    ``status`` and ``reason`` are the API server's answer (HTTP status, ``Status.reason``), when there was one;
    the 500 for a pod under several PodDisruptionBudgets carries no reason, and gets ``MultipleBudgets``.
    """

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class EvictionRejected(EvictionError):
    """429: the eviction is not allowed now; retry this pod later, not before ``retry_after`` seconds.

    ``budget``: the refusal names a PodDisruptionBudget (``details.causes`` of type ``DisruptionBudget``);
    False for API throttling. ``retry_after`` is None when the server gave no advice, which it does not
    for an exhausted budget (it gives 10 s while a changed budget is still being processed).
    """

    def __init__(self, message: str, retry_after: float | None = None, *, budget: bool = True) -> None:
        self.retry_after = retry_after
        self.budget = budget
        super().__init__(message, status=429, reason="TooManyRequests")


class PodGone(EvictionError):
    """404: the pod no longer exists (deleted, or evicted by someone else)."""


class EvictionConflict(EvictionError):
    """409: a precondition failed: the pod of that name is another one (replaced), or was modified."""


class MetricsUnavailable(SourceError):
    """Prometheus could not be reached, timed out or answered with an HTTP error."""


class MetricsMalformed(SourceError):
    """Prometheus answered, but the answer cannot be trusted (wrong type, NaN, bad labels)."""


class MetricsStale(SourceError):
    """Prometheus answered with data older than the configured maximum age."""


class PatchError(RebalancerError):
    """A pod's annotation patch was refused: ``status`` 404 (gone), 409 (modified since it was read), 400 /
    415 / 422 (a request the server does not accept), with the server's ``reason``."""

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)
