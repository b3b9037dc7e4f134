"""What `rebalancer serve` checks of a policy before it runs on it, beyond the policy's own validation.

One function, :func:`check_for_serve`, for the three places that must agree: `serve` at start, each hot
reload (a reload that start would refuse is refused: otherwise the next restart would exit 2, a crash loop
that appears long after the change), and ``check-config --for serve``. It reads the token files the policy
names, nothing else: the checks that need the cluster (the state namespace, the permissions) or the
listening ports stay with `serve` at start.

:func:`restart_required` names the settings `serve` reads only at start: a reload takes the rest of the
policy and says which of these changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from rebalancer.domain.errors import ConfigError, TokenFileError
from rebalancer.domain.settings.shared import format_duration
from rebalancer.domain.token_file import PROMETHEUS_TOKEN_FILE, WEBHOOK_TOKEN_FILE, read_token_file
from rebalancer.policy import Policy, load_policy

Problem = tuple[str, str]  # (field.path, message), as in ConfigError


class NotServable(ConfigError):
    """A valid policy that `serve` refuses to run on (at start, or as a reload)."""


@dataclass(frozen=True, slots=True)
class ServeCheck:
    problems: tuple[Problem, ...]  # serve refuses to start with the policy (a reload is refused)
    warnings: tuple[Problem, ...]  # serve starts, but something cannot work: said at once, not at first use


def check_for_serve(policy: Policy) -> ServeCheck:
    """What `serve` refuses of ``policy`` and what it warns about: the webhook's token (required unless
    ``allowUnauthenticated``; a missing or empty file authenticates nothing) and the Prometheus bearer
    token file (a missing or empty one fails every cycle)."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    webhook = policy.service.webhook
    if webhook.token_file is None and not webhook.allow_unauthenticated:
        problems.append(
            (
                "service.webhook.tokenFile",
                "not set: the webhook would take alerts from anyone who can reach its port; set it to a file "
                "holding the bearer token Alertmanager sends, or set service.webhook.allowUnauthenticated: "
                "true to run without one",
            )
        )
    elif webhook.token_file is None:
        warnings.append(
            (
                "service.webhook.allowUnauthenticated",
                f"the webhook accepts requests WITHOUT a token: anyone who can reach "
                f"{policy.service.host}:{policy.service.port} can trigger rebalancing cycles",
            )
        )
    else:
        problem = _token_file_problem(webhook.token_file, WEBHOOK_TOKEN_FILE)
        if problem:
            warnings.append(
                ("service.webhook.tokenFile", f"{problem}: every webhook request is refused until it holds the token")
            )
    if policy.prometheus.bearer_token_file is not None:
        problem = _token_file_problem(policy.prometheus.bearer_token_file, PROMETHEUS_TOKEN_FILE)
        if problem:
            warnings.append(
                ("prometheus.bearerTokenFile", f"{problem}: every cycle fails to read usage until it holds the token")
            )
    return ServeCheck(tuple(problems), tuple(warnings))


def _token_file_problem(path: str, what: str) -> str | None:
    try:
        read_token_file(path, what)
    except TokenFileError as exc:
        return str(exc)
    return None


def load_for_serve(path: str | Path) -> tuple[Policy, tuple[Problem, ...]]:
    """The policy file at ``path`` as `serve` takes it, with the warnings to say at once: ``ConfigError``
    when it is invalid, :class:`NotServable` when it is valid but `serve` refuses it."""
    policy = load_policy(path)
    check = check_for_serve(policy)
    if check.problems:
        raise NotServable(str(path), list(check.problems))
    return policy, check.warnings


def _lease_namespace(policy: Policy) -> object:
    return policy.state.namespace if policy.service.leader_election.enabled else None


# the settings `serve` reads once, at start: the listeners, the webhook's authentication and alert labels,
# the leader election (its Lease lives in state.namespace) and the reload check's own interval
_READ_AT_START: tuple[tuple[str, Callable[[Policy], object]], ...] = (
    ("service.host", lambda p: p.service.host),
    ("service.port", lambda p: p.service.port),
    ("service.metricsHost", lambda p: p.service.metrics_host),
    ("service.metricsPort", lambda p: p.service.metrics_port),
    ("service.maxConcurrentRequests", lambda p: p.service.max_concurrent_requests),
    ("service.maxConnections", lambda p: p.service.max_connections),
    ("service.headerTimeout", lambda p: p.service.header_timeout),
    ("service.bodyTimeout", lambda p: p.service.body_timeout),
    ("service.webhook.tokenFile", lambda p: p.service.webhook.token_file),
    ("service.webhook.allowUnauthenticated", lambda p: p.service.webhook.allow_unauthenticated),
    ("service.webhook.nodeLabels", lambda p: p.service.webhook.node_labels),
    ("service.leaderElection.enabled", lambda p: p.service.leader_election.enabled),
    ("service.leaderElection.leaseName", lambda p: p.service.leader_election.lease_name),
    ("service.leaderElection.leaseDuration", lambda p: p.service.leader_election.lease_duration),
    ("service.leaderElection.renewDeadline", lambda p: p.service.leader_election.renew_deadline),
    ("service.leaderElection.retryPeriod", lambda p: p.service.leader_election.retry_period),
    ("state.namespace (the Lease's)", _lease_namespace),
    ("service.reloadInterval", lambda p: p.service.reload_interval),
)


def restart_required(started: Policy, now: Policy) -> list[str]:
    """The settings `serve` reads only at start that differ between the policy it ``started`` with and
    the one it runs on ``now`` (each as ``field (at start -> now)``); empty when a reload took all."""
    changed = []
    for field, read in _READ_AT_START:
        before, after = read(started), read(now)
        if before != after:
            changed.append(f"{field} ({_shown(before)} -> {_shown(after)})")
    return changed


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, timedelta):
        return format_duration(value)
    return "unset" if value is None else str(value)
