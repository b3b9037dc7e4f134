"""The whole policy file: shared settings plus a discriminated union of strategy arguments."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.redaction import url_credentials
from rebalancer.domain.settings.efficiency import EfficiencySettings
from rebalancer.domain.settings.guard import LandingGuardSettings
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.domain.settings.shared import (
    Duration,
    DurationBounds,
    FieldProblems,
    KubernetesSettings,
    Model,
    PoolSettings,
    PrometheusSettings,
    ProtectionSettings,
    format_duration,
)
from rebalancer.planning.limits import LimitSettings
from rebalancer.policy.group_limits import group_limit_warnings
from rebalancer.policy.renamed import rename_seconds
from rebalancer.policy.unknown_keys import did_you_mean
from strategies import REGISTRY, AnyStrategySettings

log = logging.getLogger(__name__)

API_VERSION: Literal["rebalancer.io/v1alpha1"] = "rebalancer.io/v1alpha1"


class WebhookSettings(Model):
    """The Alertmanager webhook of `rebalancer serve`."""

    token_file: str | None = Field(
        default=None,
        description="File with the bearer token (a mounted Secret); requests must carry it. `serve` refuses to "
        "start without it unless allowUnauthenticated is true (a reload without it is refused too), and warns at "
        "start when the file cannot be read or is empty. Re-read when the file changes; the path is read at start.",
    )
    allow_unauthenticated: bool = Field(
        default=False,
        description="Without tokenFile, accept webhook requests from anyone who can reach the port (warned at "
        "start and exposed as rebalancer_webhook_unauthenticated 1). Ignored when tokenFile is set.",
    )
    node_labels: tuple[str, ...] = Field(
        default=("node", "instance"), min_length=1, description="Alert labels naming the node, tried in order."
    )
    alert_node_cooldown: Duration = Field(
        default=timedelta(minutes=5),
        description=(
            "After an alert-triggered cycle judged a node, its next alerts wait this long (a cycle that read"
            " no usage for the node starts none)."
        ),
    )


class LeaderElectionSettings(Model):
    """A coordination.k8s.io Lease, so that several replicas are safe: only the leader evicts. The timings
    keep retryPeriod < renewDeadline < leaseDuration."""

    renamed_seconds: ClassVar[Mapping[str, str]] = {
        "leaseDurationSeconds": "leaseDuration",
        "renewDeadlineSeconds": "renewDeadline",
        "retryPeriodSeconds": "retryPeriod",
    }

    enabled: bool = Field(default=True, description="Required when running more than one replica.")
    lease_name: str = Field(
        default="rebalancer",
        min_length=1,
        max_length=245,  # with -dry-run, within a Kubernetes name's 253 characters
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",  # a DNS subdomain name, as the API server requires
        description="Lease name, in state.namespace (at most 245 characters: lowercase letters, digits, '-' and '.'). "
        "A dry run elects on its own, this name with -dry-run: beside a live service of the same policy it never "
        "takes leadership from it.",
    )
    lease_duration: Duration = Field(
        default=timedelta(seconds=15), description="How long a lease holds without renewal."
    )
    renew_deadline: Duration = Field(default=timedelta(seconds=10), description="A leader gives up if it cannot renew.")
    retry_period: Duration = Field(default=timedelta(seconds=2), description="How often candidates try.")

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            got = ", ".join(format_duration(d) for d in (self.retry_period, self.renew_deadline, self.lease_duration))
            raise FieldProblems([("renewDeadline", f"need retryPeriod < renewDeadline < leaseDuration (got {got})")])
        return self


class WatchCacheSettings(Model):
    """Serve mode keeps the cluster in memory (list once, then watch) instead of listing it every cycle."""

    renamed_seconds: ClassVar[Mapping[str, str]] = {
        "maxStaleSeconds": "maxStale",
        "watchSeconds": "watchTimeout",
        "relistIntervalSeconds": "relistInterval",
    }

    enabled: bool = Field(
        default=True,
        description="Keep nodes, pods, ReplicaSets and budgets current through watches; a cycle never re-lists. "
        "Off: every cycle lists the cluster (alert cycles only the alerted nodes, see alertFactsMaxAge).",
    )
    max_stale: Duration = Field(
        default=timedelta(minutes=2),
        description="A collection without an open watch for this long (the watch failed and re-opening it keeps "
        "failing): the cache is not trusted and cycles evict nothing until it recovers. An open watch is fresh "
        "however long its collection stays quiet.",
    )
    watch_timeout: Annotated[Duration, DurationBounds(ge=timedelta(seconds=10), le=timedelta(hours=1))] = Field(
        default=timedelta(minutes=5), description="How long one watch request stays open before it is renewed."
    )
    relist_interval: Annotated[Duration, DurationBounds(ge=timedelta(minutes=1), le=timedelta(days=1))] = Field(
        default=timedelta(minutes=30),
        description="Each collection is listed again this often, the fallback for a watch event lost on the way; "
        "the new listing replaces the old one at once (the cache stays usable meanwhile).",
    )


class ServiceSettings(Model):
    """`rebalancer serve`: schedules, the webhook, leader election, hot reload."""

    renamed_seconds: ClassVar[Mapping[str, str]] = {
        "alertFactsMaxAgeSeconds": "alertFactsMaxAge",
        "reloadIntervalSeconds": "reloadInterval",
    }

    time_zone: str = Field(default="UTC", description="Time zone of the strategies' cron schedules.")
    host: str = Field(default="0.0.0.0", description="Listen address of the webhook.")
    port: int = Field(default=8080, ge=1, le=65535, description="Port of the webhook (and nothing else).")
    metrics_host: str | None = Field(
        default=None, description="Listen address of /metrics, /healthz and /readyz (default: host)."
    )
    metrics_port: int = Field(
        default=9102,
        ge=1,
        le=65535,
        description="Port of /metrics and the probes /healthz and /readyz, apart from the webhook's, so that no "
        "webhook client can keep a probe from being answered.",
    )
    max_concurrent_requests: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Webhook requests processed at once once their body has arrived, a worker thread each "
        "(parsing, the node lookup, queueing the alerts); one beyond that is answered 503 with Retry-After. "
        "Connections still sending, or idle, never count. Read at start, like the addresses and ports (a change "
        "needs a restart).",
    )
    max_connections: int = Field(
        default=4096,
        ge=16,
        le=65536,
        description="Open connections kept on each listener (the webhook's and the status port's). A connection "
        "beyond that closes the oldest one still waiting for its request or its body, or idle between two "
        "requests, so a crowd of slow clients cannot lock probes or alerts out. Lowered at start to what the "
        "open-files limit allows (serve raises its soft limit as far as the hard limit). Read at start.",
    )
    header_timeout: Annotated[Duration, DurationBounds(ge=timedelta(seconds=1), le=timedelta(minutes=5))] = Field(
        default=timedelta(seconds=10),
        description="A connection that has not sent a complete request line and headers this long after it "
        "opened (or after its previous answer) is closed, however slowly they trickle: also how long an idle "
        "kept-alive connection stays open. The status port uses at most 5s. Read at start.",
    )
    body_timeout: Annotated[Duration, DurationBounds(ge=timedelta(seconds=1), le=timedelta(minutes=5))] = Field(
        default=timedelta(seconds=10),
        description="A webhook body must arrive in full this long after its headers, however slowly it "
        "trickles, or the request is answered 408. Read at start.",
    )
    webhook: WebhookSettings = Field(default_factory=WebhookSettings, description="Alertmanager webhook.")
    leader_election: LeaderElectionSettings = Field(
        default_factory=LeaderElectionSettings, description="Lease-based leader election."
    )
    alert_facts_max_age: Duration | None = Field(
        default=timedelta(minutes=10),
        description="An alert-driven cycle lists only the alerted nodes' pods when the last full listing is "
        "younger than this (destinations' requests come from it); null: always list everything.",
    )
    watch_cache: WatchCacheSettings = Field(
        default_factory=WatchCacheSettings, description="The in-memory cluster view of serve mode."
    )
    run_on_start: bool = Field(default=True, description="Run every strategy once at start, then on schedule.")
    reload_interval: Duration = Field(
        default=timedelta(seconds=10), description="How often the policy file is checked for changes (hot reload)."
    )

    @model_validator(mode="after")
    def _zone(self) -> ServiceSettings:
        try:
            ZoneInfo(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise FieldProblems([("timeZone", f"unknown time zone {self.time_zone!r}")]) from None
        return self

    @model_validator(mode="after")
    def _ports_apart(self) -> ServiceSettings:
        if self.metrics_port == self.port:
            raise FieldProblems([("metricsPort", f"must differ from port ({self.port}): the webhook has its own")])
        return self


class StateSettings(Model):
    """Limiter state lives in the cluster, so CronJob runs and concurrent instances share the caps."""

    namespace: str | None = Field(
        default=None,
        description="Namespace of the state ConfigMaps (default: $POD_NAMESPACE, then the service account's).",
    )
    config_map: str = Field(default="rebalancer-state", min_length=1, description="ConfigMap of the limiter state.")
    backoff_config_map: str = Field(
        default="rebalancer-backoff", min_length=1, description="ConfigMap of the per-pod backoff after 429s."
    )
    efficiency_config_map: str = Field(
        default="rebalancer-efficiency",
        min_length=1,
        description="ConfigMap of the efficiency records (hot nodes found, evictions and their follow-up).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> StateSettings:
        problems = []
        if self.config_map == self.backoff_config_map:
            problems.append(("backoffConfigMap", "must differ from configMap (both use the key state.json)"))
        if self.efficiency_config_map in (self.config_map, self.backoff_config_map):
            problems.append(("efficiencyConfigMap", "must differ from configMap and backoffConfigMap"))
        if problems:
            raise FieldProblems(problems)
        return self


class Policy(Model):
    """A rebalancer policy (strategy YAML)."""

    api_version: Literal["rebalancer.io/v1alpha1"] = Field(default=API_VERSION, description="Policy format.")
    kind: Literal["RebalancerPolicy"] = Field(default="RebalancerPolicy", description="Always RebalancerPolicy.")
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings, description="Where usage comes from.")
    kubernetes: KubernetesSettings = Field(
        default_factory=KubernetesSettings, description="How the Kubernetes API is read."
    )
    pools: PoolSettings = Field(default_factory=PoolSettings, description="How nodes form resource pools.")
    protections: ProtectionSettings = Field(
        default_factory=ProtectionSettings, description="Pods that are never evicted."
    )
    strategies: tuple[AnyStrategySettings, ...] = Field(min_length=1, description="Strategies, run in order.")
    limits: LimitSettings = Field(
        default_factory=LimitSettings, description="Rate limiters, caps, time windows and lists (the evictor)."
    )
    state: StateSettings = Field(default_factory=StateSettings, description="Where limiter state is kept.")
    service: ServiceSettings = Field(default_factory=ServiceSettings, description="Settings of `rebalancer serve`.")
    predictor: PredictorSettings = Field(
        default_factory=PredictorSettings, description="The next-peak load predictor (`rebalancer predict`)."
    )
    efficiency: EfficiencySettings = Field(
        default_factory=EfficiencySettings,
        description="Eviction follow-up, bounce-back memory and the efficiency rates (`rebalancer report`).",
    )
    landing_guard: LandingGuardSettings = Field(
        default_factory=LandingGuardSettings,
        description="The soft landing guard: a taint on hot and just-relieved nodes so that replacements land "
        "elsewhere (opt-in per pool; needs patch nodes).",
    )

    @property
    def reads_memory(self) -> bool:
        """Some strategy has memory thresholds on real usage: each cycle reads the memory working set too."""
        return any(s.reads_memory_usage() for s in self.strategies)

    @property
    def other_resources(self) -> frozenset[str]:
        """The resources besides CPU some enabled strategy's thresholds name (memory, pods)."""
        return frozenset(r for s in self.strategies if s.enabled for r in s.other_resources())


MAX_POLICY_BYTES = 1 << 20
"""A policy is a few kilobytes; a larger file is refused unread, before any parsing."""
MAX_PROBLEMS = 50
"""At most this many problems are reported for one file (the count of the others follows)."""


class _StrictLoader(yaml.CSafeLoader):
    """libyaml's SafeLoader (fast, nesting bounded) refusing duplicate keys instead of keeping the last one."""


MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """The mapping, a key written twice refused; merge keys (``<<: *anchor``) as SafeLoader reads them: the
    merged keys come first, so the mapping's own keys override them."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value, not a list or a mapping", key_node.start_mark
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, source: str) -> object:
    """One YAML document, duplicate keys refused; ConfigError when it is not valid YAML or nested too deeply."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [("", f"not valid YAML: {exc}")]) from exc
    except (RecursionError, MemoryError) as exc:
        raise ConfigError(source, [("", "not a policy: the YAML is nested too deeply")]) from exc


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Validate policy YAML; raise ConfigError with one (field.path, message) per problem, and nothing else.
    Each former key read is logged as a warning."""
    policy, warnings = parse_policy_warning(text, source)
    for warning in warnings:
        log.warning("%s: %s", source, warning)
    return policy


def parse_policy_warning(text: str, source: str = "<policy>") -> tuple[Policy, list[str]]:
    """:func:`parse_policy`, with the warnings returned instead of logged (``check-config`` shows them)."""
    data = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(source, [("", f"the policy must be a YAML mapping, not {_yaml_type(data)}")])
    try:
        data, renaming = rename_seconds(Policy, data)
        if renaming.problems:
            raise ConfigError(source, _at_most(renaming.problems))
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _at_most(renaming.name_old_keys(validation_problems(exc, Policy)))) from exc
    except RecursionError as exc:
        raise ConfigError(source, [("", "not a policy: the YAML is nested too deeply")]) from exc
    return policy, [*renaming.warnings, *_credential_warnings(policy), *group_limit_warnings(policy)]


def _credential_warnings(policy: Policy) -> list[str]:
    """A credential written into the Prometheus URL works (requests sends it as basic authentication) and
    is never printed, but the policy keeps it in plain text wherever the policy goes (the chart's ConfigMap)."""
    return [
        f"prometheus.url: holds {found}: it is never printed (shown as ***), but the policy keeps it in plain "
        "text, readable by anyone who can read the policy (the chart's ConfigMap); put a bearer token in a file "
        "(a mounted Secret) and name it in prometheus.bearerTokenFile instead"
        for found in [url_credentials(policy.prometheus.url)]
        if found is not None
    ]


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file: a file over MAX_POLICY_BYTES or not UTF-8 is refused before parsing."""
    return parse_policy(read_policy_text(path), str(path))


def read_policy_text(path: str | Path) -> str:
    """A policy file's text; ConfigError when it cannot be read, is over MAX_POLICY_BYTES or is not UTF-8."""
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read: {exc.strerror or exc}")]) from exc
    if len(raw) > MAX_POLICY_BYTES:
        raise ConfigError(str(path), [("", f"larger than {MAX_POLICY_BYTES // 1024} KiB: not a policy file")])
    return decode_policy(raw, str(path))


def decode_policy(raw: bytes, source: str) -> str:
    """The policy's text; anything but UTF-8 is a ConfigError naming the first bad byte's line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line, column = before.count(b"\n") + 1, exc.start - (before.rfind(b"\n") + 1) + 1
        raise ConfigError(
            source, [("", f"not UTF-8: byte 0x{raw[exc.start]:02x} at line {line}, column {column}")]
        ) from None


def _yaml_type(data: object) -> str:
    if data is None:
        return "an empty document"
    if isinstance(data, list):
        return "a list"
    return f"a single value ({type(data).__name__})"


def _at_most(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], ("", f"and {len(problems) - MAX_PROBLEMS} more problems")]


def validation_problems(exc: ValidationError, model: type[BaseModel] | None = None) -> list[tuple[str, str]]:
    """Pydantic errors as (dotted.path, message), without the union's internal tag in the path; with the
    validated ``model``, an unknown key names the closest accepted one."""
    problems: list[tuple[str, str]] = []
    errors = exc.errors(include_url=False)
    for error in errors:
        parts: list[str] = []
        loc = error["loc"]
        if error["type"] == "too_short" and any(
            e["loc"][: len(loc)] == loc and len(e["loc"]) > len(loc) for e in errors
        ):
            continue  # pydantic recounts a sequence without its invalid items; those are reported already
        for i, part in enumerate(loc):
            if isinstance(part, str) and part in REGISTRY and i > 0 and isinstance(loc[i - 1], int):
                continue  # the discriminated union's tag, not a field
            parts.append(str(part))
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblems):
            problems.extend((".".join([*parts, sub]), message) for sub, message in cause.problems)
            continue
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden" and model is not None:
            message += did_you_mean(model, loc)
        problems.append((".".join(parts), message))
    return problems
