"""Pydantic v2 models for the parts of the policy that every strategy shares.

Input from outside only: frozen, unknown fields rejected, camelCase in YAML, every field described.
Strategy arguments live beside each strategy (``strategies/``); the whole policy is ``rebalancer.policy``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

import annotated_types
from pydantic import (
    AfterValidator,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from rebalancer.domain.labels import SELECTOR_OPERATORS, LabelSelector, Requirement
from rebalancer.domain.redaction import redact_url
from rebalancer.domain.settings.node_sources import (
    DEFAULT_NODE_SOURCES,
    NodeSource,
    NodeSourceName,
    built_in,
    order_problems,
)

Percent = Annotated[float, Field(ge=0, le=100)]


def _http_url(text: str) -> str:
    """An absolute http(s) base URL with a host, without query or fragment; the text is kept as written."""
    if any(c.isspace() for c in text):
        raise ValueError(f"{redact_url(text)!r} is not an http(s) URL: it contains white space")
    try:
        parts = urlsplit(text)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number or out of range
        valid = False
    if not valid:
        raise ValueError(
            f"{redact_url(text)!r} is not an http(s) URL such as http://prometheus-operated.monitoring:9090"
        )
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise ValueError(
            f"{redact_url(text)!r} is a base URL: the API's paths (/api/v1/query) are appended to it, so it takes no query "
            "(?...) or fragment (#...)"
        )
    return text


HttpUrlText = Annotated[str, AfterValidator(_http_url)]
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def _duration_pattern() -> str:
    """Whole numbers with units, largest first, each unit at most once: 30s, 5m, 1h30m, 1d (no look-ahead, so
    that Helm's schema check reads it too)."""
    part = {unit: f"[1-9][0-9]*{unit}" for unit in _UNIT_SECONDS}
    units = list(_UNIT_SECONDS)
    starts = ["".join([part[first], *(f"({part[u]})?" for u in units[i + 1 :])]) for i, first in enumerate(units)]
    return f"^({'|'.join(starts)})$"


DURATION_PATTERN = _duration_pattern()
_DURATION = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(r"([0-9]+)([dhms])")


def parse_duration(text: str) -> timedelta:
    """``"30s"``, ``"5m"``, ``"1h30m"``, ``"1d"`` as a timedelta; anything else is a ValueError saying why."""
    if _DURATION.match(text) is None:
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m, 1h30m, 1d (whole numbers, units d h m s)")
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text)))


def format_duration(value: timedelta) -> str:
    """The duration in its largest whole unit (``5m``, ``90s``, ``1d``): how the policy writes it, and valid
    PromQL. Below a second, whole seconds cannot say it: a ValueError."""
    seconds = value.total_seconds()
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"{value} is not a positive whole number of seconds")
    for unit, size in _UNIT_SECONDS.items():
        if int(seconds) % size == 0:
            return f"{int(seconds) // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds is a multiple of 1 s")


def _read_duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        format_duration(value)  # positive, whole seconds
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration such as 30s, 5m, 1h30m, 1d: a number needs its unit")
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    PlainValidator(_read_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": DURATION_PATTERN, "description": "A duration such as 30s, 5m, 1h30m, 1d."}
    ),
]
"""A duration: a ``timedelta`` in the model, ``"5m"`` in YAML."""


@dataclass(frozen=True)
class DurationBounds(annotated_types.BaseMetadata):
    """Inclusive bounds of a :data:`Duration` field (``Annotated[Duration, DurationBounds(le=...)]``), checked
    after the text is read; the error says the bound as the policy writes it."""

    ge: timedelta | None = None
    le: timedelta | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: timedelta) -> timedelta:
        if self.ge is not None and value < self.ge:
            raise ValueError(f"{format_duration(value)} is shorter than {format_duration(self.ge)}")
        if self.le is not None and value > self.le:
            raise ValueError(f"{format_duration(value)} is longer than {format_duration(self.le)}")
        return value


class FieldProblems(ValueError):
    """Raised by cross-field validators: each problem names the field it is about (relative path)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


def _former_keys_in_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The JSON schema accepts a model's former keys (a number of seconds), so that a chart install with an
    older policy passes; the pod converts them and warns."""
    renamed: Mapping[str, str] = getattr(model, "renamed_seconds", {})
    for old, new in renamed.items():
        schema["properties"][old] = {
            "type": "number",
            "minimum": 0,
            "deprecated": True,
            "description": f"Former name of {new}, in seconds: still read, with a warning.",
        }


class Model(BaseModel):
    """Base of every policy model."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        populate_by_name=True,
        use_attribute_docstrings=True,
        json_schema_extra=_former_keys_in_schema,
    )

    renamed_seconds: ClassVar[Mapping[str, str]] = {}
    """Former keys that held a number of seconds, each with the Duration field that replaced it (YAML names):
    a policy file may still use them (``rebalancer.policy.renamed`` converts them, with a warning)."""


class SelectorRequirementSpec(Model):
    key: str = Field(min_length=1, description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="How the key is tested.")
    values: tuple[str, ...] = Field(default=(), description="Values for In / NotIn; empty otherwise.")

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirementSpec:
        assert self.operator in SELECTOR_OPERATORS
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelectorSpec(Model):
    """A Kubernetes label selector: every matchLabels pair and every expression must hold."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Exact label values.")
    match_expressions: tuple[SelectorRequirementSpec, ...] = Field(default=(), description="Set-based rules.")

    def to_selector(self) -> LabelSelector:
        return LabelSelector(
            match_labels=tuple(sorted(self.match_labels.items())),
            match_expressions=tuple(Requirement(r.key, r.operator, tuple(r.values)) for r in self.match_expressions),
        )


class ResourceThresholds(Model):
    """Thresholds in percent of allocatable, per resource. A node is hot when any resource named is over its
    target, cold (underutilized) when every one is under its threshold (the descheduler's rule)."""

    cpu: Percent = Field(description="CPU usage in percent of the node's allocatable CPU.")
    memory: Percent | None = Field(
        default=None,
        description="Memory usage (working set, from prometheus.queries nodeMemory and podMemory; requests with "
        "classifyBy requests) in percent of the node's allocatable memory; on both sides (thresholds and "
        "targetThresholds) or neither. Unset: memory plays no part.",
    )
    pods: Percent | None = Field(
        default=None,
        description="Pods bound to the node (not finished) in percent of its allocatable pods; on both sides "
        "(thresholds and targetThresholds) or neither. Unset: the pod count plays no part.",
    )

    def extra(self) -> tuple[tuple[str, float], ...]:
        """The resources other than CPU that are set, with their percentages (memory first)."""
        return tuple(
            (name, value) for name, value in (("memory", self.memory), ("pods", self.pods)) if value is not None
        )


class PoolDefinition(Model):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$", description="Pool name.")
    node_selector: LabelSelectorSpec = Field(description="Nodes whose labels match belong to this pool.")


class PoolSettings(Model):
    """How nodes are grouped into resource pools (for example inference / hybrid / training)."""

    definitions: tuple[PoolDefinition, ...] = Field(
        default=(), description="Named pools, tried in order; the first whose nodeSelector matches wins."
    )
    label: str | None = Field(
        default=None,
        description="Otherwise, the value of this node label names the pool (for example 'node-pool').",
    )
    default_pool: str = Field(default="default", min_length=1, description="Pool of nodes nothing else names.")

    @model_validator(mode="after")
    def _unique_names(self) -> PoolSettings:
        names = [d.name for d in self.definitions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(duplicates)}")
        return self


class NamespaceFilter(Model):
    include: tuple[str, ...] = Field(default=(), description="Only these namespaces (empty: all).")
    exclude: tuple[str, ...] = Field(default=(), description="Never these namespaces.")

    @model_validator(mode="after")
    def _not_both(self) -> NamespaceFilter:
        if self.include and self.exclude:
            raise ValueError("set include or exclude, not both")
        return self


class ProtectionSettings(Model):
    """Which pods are never evicted. Mirror, static, DaemonSet, terminating and system-critical pods
    are always protected; the settings below add to that."""

    evictable_namespaces: NamespaceFilter = Field(
        default_factory=lambda: NamespaceFilter(exclude=("kube-system",)),
        description="Namespaces whose pods may be evicted. kube-system only when include names it: an exclude "
        "list given replaces the default one and still keeps kube-system.",
    )
    label_selector: LabelSelectorSpec | None = Field(
        default=None, description="When set, only pods matching it may be evicted."
    )
    protected_label_selector: LabelSelectorSpec | None = Field(
        default=None, description="Pods matching it are never evicted (for example a service-tier label)."
    )
    priority_threshold: int | None = Field(
        default=None, description="Pods with priority at or above this value are never evicted."
    )
    protected_priority_classes: tuple[str, ...] = Field(
        default=(), description="Pods of these PriorityClasses are never evicted."
    )
    evict_local_storage_pods: bool = Field(
        default=False,
        description="Allow evicting pods with emptyDir or hostPath volumes (their data is lost).",
    )
    evict_pods_with_pvc: bool = Field(
        default=True,
        validation_alias="evictPodsWithPVC",
        serialization_alias="evictPodsWithPVC",
        description="Allow evicting pods that mount a PVC.",
    )
    opt_out_annotation: str = Field(
        default="rebalancer.io/evict",
        description="A pod with this annotation set to 'false' is never evicted; 'true' opts it in.",
    )
    honor_descheduler_opt_in: bool = Field(
        default=True,
        description="Treat 'descheduler.alpha.kubernetes.io/evict' as an explicit opt-in, as the descheduler does.",
    )


DEFAULT_POD_CPU_QUERY = (
    "quantile_over_time({quantile}, (sum by (namespace, pod) ("
    'rate(container_cpu_usage_seconds_total{{container!="", container!="POD"{pod_filter}}}[{rate_window}])'
    "))[{window}:{step}])"
)
DEFAULT_NODE_CPU_QUERY = (
    "quantile_over_time({quantile}, (sum by ({node_label}) ("
    'rate(container_cpu_usage_seconds_total{{id="/"}}[{rate_window}])'
    "))[{window}:{step}])"
)
# memory is a gauge: the same statistic over the working set itself, no rate()
DEFAULT_POD_MEMORY_QUERY = (
    "quantile_over_time({quantile}, (sum by (namespace, pod) ("
    'container_memory_working_set_bytes{{container!="", container!="POD"{pod_filter}}}'
    "))[{window}:{step}])"
)
DEFAULT_NODE_MEMORY_QUERY = (
    "quantile_over_time({quantile}, (sum by ({node_label}) ("
    'container_memory_working_set_bytes{{id="/"}}'
    "))[{window}:{step}])"
)
# timestamp() alone only sees the 5-minute lookback, so a stale node would vanish instead of showing its age:
# the newest sample time over the same span the usage queries read.
DEFAULT_NODE_FRESHNESS_QUERY = (
    'max by ({node_label}) (max_over_time(timestamp(container_cpu_usage_seconds_total{{id="/"}})[{window}:{step}]))'
)

# A series younger than rateWindow makes rate() spread a short history over the whole window (a node with
# 70 s of data reads a fraction of its usage): present now, absent {data_span} earlier is too young to read.
_POD_SERIES = 'container_cpu_usage_seconds_total{{container!="", container!="POD"{pod_filter}}}'
DEFAULT_YOUNG_POD_QUERY = (
    f"group by (namespace, pod) ({_POD_SERIES}) unless group by (namespace, pod) ({_POD_SERIES} offset {{data_span}})"
)
_NODE_SERIES = 'container_cpu_usage_seconds_total{{id="/"}}'
DEFAULT_YOUNG_NODE_QUERY = (
    f"group by ({{node_label}}) ({_NODE_SERIES}) unless group by ({{node_label}}) ({_NODE_SERIES} offset {{data_span}})"
)

_NODE_QUERY_FIELDS = frozenset({"node_cpu", "node_freshness", "young_nodes", "node_memory"})
_REGEX_SPECIAL = re.compile(r"([.\\\\+*?()|\[\]{}^$])")


class UsageQueries(Model):
    """PromQL templates. Placeholders: {quantile} {window} {step} {rate_window} {node_label} {pod_node_label}
    {data_span} (rateWindow + step, in seconds), and in podCpu and youngPods {pod_filter}: empty, or
    `, <podNodeLabel>=~"a|b"` when a cycle needs only some nodes' pods (an alert's)."""

    pod_cpu: str = Field(
        default=DEFAULT_POD_CPU_QUERY,
        description="Per-pod CPU cores, one series per (namespace, pod). The default excludes cAdvisor's "
        'pod-level (container="") and pause (container="POD") series, which would double the usage.',
    )
    node_cpu: str | None = Field(
        default=DEFAULT_NODE_CPU_QUERY,
        description="Per-node CPU cores, one series per node (label nodeLabel): the cadvisor node source. The "
        "default reads cAdvisor's root cgroup, which includes system daemons. Setting this or nodeFreshness, "
        "youngNodes or nodeMemory while prometheus.nodeSources is unset makes these queries the only node "
        "source (no fallback, as before nodeSources existed); null then: a node's usage is the sum of its "
        "pods' usage, checked by nodeFreshness and youngNodes.",
    )
    node_freshness: str | None = Field(
        default=DEFAULT_NODE_FRESHNESS_QUERY,
        description="Per-node time of the newest raw sample (the cadvisor node source); a node older than "
        "maxDataAge is looked up in the next node source.",
    )
    young_nodes: str | None = Field(
        default=DEFAULT_YOUNG_NODE_QUERY,
        description="Nodes whose data began less than {data_span} (rateWindow + step) ago: one series per node "
        "(label nodeLabel), for example present now and absent {data_span} earlier. Their usage is looked up in the "
        "next node source (unknown when none knows them): rate() would spread the short history over the whole "
        "rateWindow and read them cold. null: not checked.",
    )
    young_pods: str | None = Field(
        default=DEFAULT_YOUNG_POD_QUERY,
        description="The same for pods, one series per (namespace, pod), with {pod_filter} as in podCpu; their "
        "usage is unknown. null: not checked.",
    )
    pod_memory: str = Field(
        default=DEFAULT_POD_MEMORY_QUERY,
        description="Per-pod memory working set in bytes, one series per (namespace, pod), with {pod_filter} as "
        "in podCpu. Read only when a strategy has memory thresholds (classifyBy current). The default excludes "
        "cAdvisor's pod-level and pause series, as podCpu does.",
    )
    node_memory: str = Field(
        default=DEFAULT_NODE_MEMORY_QUERY,
        description="Per-node memory working set in bytes, one series per node (label nodeLabel), of the nodes "
        "the cadvisor node source knows; read only when a strategy has memory thresholds. The default reads "
        "cAdvisor's root cgroup, as nodeCpu does (the nodeExporter source reads "
        "`node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes`, podSum its pods' working set).",
    )


class PrometheusSettings(Model):
    renamed_seconds: ClassVar[Mapping[str, str]] = {"timeoutSeconds": "timeout", "maxDataAgeSeconds": "maxDataAge"}

    url: HttpUrlText = Field(
        default="http://prometheus-operated.monitoring:9090",
        description="Prometheus base URL, without query or fragment. A user:password@ in it is sent as basic "
        "authentication and never printed (shown as ***), but check-config and every command warn: the policy "
        "keeps it in plain text. Prefer bearerTokenFile.",
    )
    timeout: Annotated[Duration, DurationBounds(le=timedelta(minutes=5))] = Field(
        default=timedelta(seconds=15),
        description="Timeout of one query: Prometheus is asked to evaluate it within this long, the answer must "
        "begin within it and never pause for longer, and the whole answer must arrive within twice it.",
    )
    bearer_token_file: str | None = Field(
        default=None,
        description="File holding a bearer token (a mounted Secret), if needed; read at each cycle, so a rotated "
        "token is taken. `serve` warns at start and at reload when it cannot be read or is empty.",
    )
    verify_tls: bool = Field(default=True, description="Verify the server certificate for https URLs.")
    window: Duration = Field(
        default=timedelta(minutes=10), description="Usage is a statistic over this window (spike guard)."
    )
    quantile: float = Field(default=0.95, gt=0, le=1, description="Quantile taken over the window.")
    step: Duration = Field(default=timedelta(minutes=1), description="Subquery resolution inside the window.")
    rate_window: Duration = Field(
        default=timedelta(minutes=5),
        description="rate() window; at least two scrape intervals or rate() returns nothing.",
    )
    node_label: str = Field(
        default="node",
        min_length=1,
        description="Label that carries the node name on the nodeCpu and nodeFreshness answers (node_exporter "
        "series: `instance`, relabelled to the node name by kube-prometheus).",
    )
    pod_node_label: str = Field(
        default="node",
        min_length=1,
        description="Label that carries the node name on the per-pod series (cAdvisor's, `node` under "
        "kube-prometheus; their `instance` is the kubelet's address): {pod_filter} matches it.",
    )
    max_data_age: Duration = Field(
        default=timedelta(minutes=5),
        description="A node whose newest sample in a node source is older is looked up in the next source "
        "(unknown when none knows it); if every node's is, no evictions.",
    )
    node_sources: tuple[NodeSourceName, ...] = Field(
        default=DEFAULT_NODE_SOURCES,
        description="Where a node's usage comes from, first choice first; a node missing from a source (no "
        "series, or data too old or too young there) is looked up in the next, a node no source knows is "
        "unknown. cadvisor: queries nodeCpu, nodeFreshness, youngNodes, nodeMemory (by default cAdvisor's "
        "root cgroup: the whole node, system daemons included); nodeExporter: node_exporter's busy CPU and "
        "MemTotal - MemAvailable, its node named by kube-state-metrics' kube_pod_info joined on the "
        "node-exporter pod's (namespace, pod), as kube-prometheus-stack labels it; podSum: the sum of the "
        "node's pods' usage, known only when every running pod on it has usage and its pods' series are "
        "fresh, without system overhead (reads the node low), so only last. Unset while queries sets a node "
        "query: those queries alone.",
    )
    queries: UsageQueries = Field(default_factory=UsageQueries, description="PromQL templates.")

    def render(self, template: str, nodes: frozenset[str] | None = None) -> str:
        """Fill a template; ``nodes`` narrows ``{pod_filter}`` to those nodes' pods (None: every pod)."""
        pod_filter = ""
        if nodes:
            # node names are DNS subdomains: only "." is special in the RE2 pattern; the PromQL string doubles "\\"
            pattern = "|".join(_REGEX_SPECIAL.sub(r"\\\\\1", n) for n in sorted(nodes))
            pod_filter = f', {self.pod_node_label}=~"{pattern}"'
        return template.format(
            quantile=self.quantile,
            window=format_duration(self.window),
            step=format_duration(self.step),
            rate_window=format_duration(self.rate_window),
            node_label=self.node_label,
            pod_node_label=self.pod_node_label,
            pod_filter=pod_filter,
            data_span=f"{self.data_span_seconds}s",
        )

    @property
    def data_span_seconds(self) -> int:
        """How much history a series needs before its usage is read: rateWindow plus one step (PromQL's
        ``offset`` and the messages say it in seconds)."""
        return int((self.rate_window + self.step).total_seconds())

    def resolved_node_sources(self) -> tuple[NodeSource, ...]:
        """The node sources in the order they are tried (:mod:`rebalancer.domain.settings.node_sources`).

        A policy that sets a node query (nodeCpu, nodeFreshness, youngNodes, nodeMemory) and no nodeSources
        keeps the meaning it had before nodeSources: those queries alone, or with nodeCpu null the sum of
        the pods checked by nodeFreshness and youngNodes."""
        q = self.queries
        legacy = bool(q.model_fields_set & _NODE_QUERY_FIELDS) and "node_sources" not in self.model_fields_set
        if legacy and q.node_cpu is None:
            return (NodeSource("podSum", None, q.node_freshness, q.young_nodes, q.node_memory, self.node_label, True),)
        names: tuple[NodeSourceName, ...] = ("cadvisor",) if legacy else self.node_sources
        return tuple(self._cadvisor() if name == "cadvisor" else built_in(name, self.pod_node_label) for name in names)

    def _cadvisor(self) -> NodeSource:
        q = self.queries
        name = "cadvisor" if q.node_cpu == DEFAULT_NODE_CPU_QUERY else "queries.nodeCpu"
        return NodeSource(name, q.node_cpu, q.node_freshness, q.young_nodes, q.node_memory, self.node_label, True)

    @model_validator(mode="after")
    def _templates_render(self) -> PrometheusSettings:
        for name in ("pod_cpu", "node_cpu", "node_freshness", "young_nodes", "young_pods", "pod_memory", "node_memory"):
            template = getattr(self.queries, name)
            if template is None:
                continue
            try:
                self.render(template)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"queries.{to_camel(name)}: cannot fill the template: {exc!r}") from exc
        return self

    @model_validator(mode="after")
    def _node_sources_usable(self) -> PrometheusSettings:
        problems = [("nodeSources", problem) for problem in order_problems(self.node_sources)]
        if (
            "cadvisor" in self.node_sources
            and self.queries.node_cpu is None
            and "node_sources" in self.model_fields_set
        ):
            problems.append(
                ("nodeSources", "cadvisor reads queries.nodeCpu, which is null: set it, or leave cadvisor out")
            )
        if problems:
            raise FieldProblems(problems)
        return self


class KubernetesSettings(Model):
    """How the Kubernetes API is read."""

    list_mode: Literal["cached", "auto", "watchList", "paged"] = Field(
        default="cached",
        description="How a whole collection (nodes, pods, ReplicaSets, budgets) is read, by a CronJob cycle, "
        "`plan`, and the serve mode's watch cache when it lists. cached: in pages served from the API server's "
        "watch cache (resourceVersion 1, resourceVersionMatch NotOlderThan: any version the cache holds, "
        "behind etcd by its watch's delay, as client-go's informers list), the read costing the API server "
        "least, over etcd 3.4 and 3.6 alike; a stale pod is never evicted wrongly (each eviction re-reads "
        "its pod and names its uid); a collection whose cached list the server cannot continue (HTTP 410: a "
        "quiet collection over etcd older than 3.5) is read in consistent pages, with a warning. paged: in consistent pages (from etcd where the server cannot serve "
        "them from its cache, etcd older than 3.5). watchList: one streaming watch-list (sendInitialEvents), "
        "a failure is an error. auto: a watch-list, and cached pages when it fails (a server older than "
        "v1.27, the WatchList feature gate off, etcd older than 3.5, an error midway).",
    )
    encoding: Literal["protobuf", "json"] = Field(
        default="protobuf",
        description="How the API server encodes the pages of nodes, ReplicaSets and pods a full read lists: "
        "protobuf (application/vnd.kubernetes.protobuf; JSON is accepted too, for a server that cannot "
        "encode protobuf) costs the API server less CPU and rebalancer more; json costs rebalancer least. "
        "Watch events and budgets are always JSON.",
    )
