"""A descheduler policy in one shape: profiles of plugin arguments (pure).

Accepted documents: a ``descheduler/v1alpha2`` ``DeschedulerPolicy``; a ``descheduler/v1alpha1`` one (its
strategies become one profile each, as the descheduler's own conversion does: a strategy's ``nodeFit``,
``thresholdPriority`` and ``labelSelector`` go to that profile's DefaultEvictor); the descheduler chart's
values with a ``deschedulerPolicy:`` (either version, without apiVersion); a ConfigMap holding one of them
under ``data.policy.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from rebalancer.app.descheduler.notes import Note, Notes

V1ALPHA1, V1ALPHA2 = "descheduler/v1alpha1", "descheduler/v1alpha2"
TOP_LEVEL_EVICTOR_V1ALPHA1 = (
    "evictLocalStoragePods",
    "evictSystemCriticalPods",
    "ignorePvcPods",
    "evictFailedBarePods",
)
BOTH_THRESHOLDS = "a priority threshold by value and by PriorityClass name both: the descheduler refuses it; keep one"


class SourceProblem(ValueError):
    """The document is no descheduler policy this import reads: (field path, message)."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path or '<document>'}: {message}")


@dataclass(frozen=True, slots=True)
class Profile:
    """One descheduler profile: its plugins' arguments by name and the plugins it runs."""

    name: str
    path: str  # where it is in the document, for notes
    args: Mapping[str, Mapping[str, Any]]  # plugin name -> args
    enabled: tuple[str, ...]  # the balance and deschedule plugins it runs
    single: bool = False  # a v1alpha1 strategy: the profile is the plugin, its evictor the policy's

    def plugin_path(self, name: str) -> str:
        """Where the plugin's arguments are in the document."""
        return f"{self.path}.params" if self.single else f"{self.path}.{name}"


@dataclass(frozen=True, slots=True)
class Source:
    version: str
    shape: str  # for the header: "descheduler/v1alpha2 DeschedulerPolicy", "descheduler chart values", ...
    top: Mapping[str, Any]  # the policy's top-level keys (limits, nodeSelector, metrics providers, ...)
    profiles: tuple[Profile, ...]
    chart: Mapping[str, Any] = field(default_factory=dict)  # the chart's values besides deschedulerPolicy


def read_source(document: object, notes: Notes) -> Source:
    """The profiles of a parsed YAML document; SourceProblem when it is no descheduler policy."""
    doc = mapping(document, "")
    if doc.get("kind") == "ConfigMap":
        data = mapping(doc.get("data"), "data")
        text = data.get("policy.yaml")
        if not isinstance(text, str):
            raise SourceProblem("data", "a ConfigMap of the descheduler holds its policy under data.policy.yaml")
        try:
            embedded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SourceProblem("data.policy.yaml", f"not valid YAML: {exc}") from exc
        inner = read_source(embedded, notes)
        return Source(inner.version, f"{inner.shape} (ConfigMap data.policy.yaml)", inner.top, inner.profiles)
    if "deschedulerPolicy" in doc:
        return _chart_values(doc, notes)
    if doc.get("kind") != "DeschedulerPolicy":
        raise SourceProblem(
            "kind", f"{doc.get('kind')!r}: expected a DeschedulerPolicy, its chart's values (deschedulerPolicy:) or a "
            "ConfigMap holding policy.yaml"
        )  # fmt: skip
    version = doc.get("apiVersion")
    if version == V1ALPHA2:
        return Source(V1ALPHA2, f"{V1ALPHA2} DeschedulerPolicy", doc, _profiles_v1alpha2(doc, "", notes))
    if version == V1ALPHA1:
        return Source(V1ALPHA1, f"{V1ALPHA1} DeschedulerPolicy", doc, _profiles_v1alpha1(doc, "", notes))
    raise SourceProblem("apiVersion", f"{version!r}: expected {V1ALPHA2} or {V1ALPHA1}")


def _chart_values(values: Mapping[str, Any], notes: Notes) -> Source:
    policy = mapping(values.get("deschedulerPolicy"), "deschedulerPolicy")
    version = values.get("deschedulerPolicyAPIVersion")
    if version is None:
        version = V1ALPHA2 if "profiles" in policy else V1ALPHA1 if "strategies" in policy else None
    chart = {k: v for k, v in values.items() if k not in ("deschedulerPolicy", "deschedulerPolicyAPIVersion")}
    shape = f"descheduler chart values, {version} policy"
    if version == V1ALPHA2:
        return Source(V1ALPHA2, shape, policy, _profiles_v1alpha2(policy, "deschedulerPolicy.", notes), chart)
    if version == V1ALPHA1:
        return Source(V1ALPHA1, shape, policy, _profiles_v1alpha1(policy, "deschedulerPolicy.", notes), chart)
    raise SourceProblem("deschedulerPolicy", "neither profiles (v1alpha2) nor strategies (v1alpha1)")


def _profiles_v1alpha2(policy: Mapping[str, Any], prefix: str, notes: Notes) -> tuple[Profile, ...]:
    profiles = []
    for i, raw in enumerate(sequence(policy.get("profiles"), f"{prefix}profiles")):
        path = f"{prefix}profiles.{i}"
        profile = mapping(raw, path)
        args: dict[str, Mapping[str, Any]] = {}
        for j, config in enumerate(sequence(profile.get("pluginConfig"), f"{path}.pluginConfig")):
            entry = mapping(config, f"{path}.pluginConfig.{j}")
            name = entry.get("name")
            if not isinstance(name, str):
                raise SourceProblem(f"{path}.pluginConfig.{j}.name", "a plugin name is required")
            args[name] = mapping(entry.get("args"), f"{path}.pluginConfig.{j}.args")
        plugins = mapping(profile.get("plugins"), f"{path}.plugins")
        enabled: list[str] = []
        for point in ("balance", "deschedule"):
            found = mapping(plugins.get(point), f"{path}.plugins.{point}")
            for k, name in enumerate(sequence(found.get("enabled"), f"{path}.plugins.{point}.enabled")):
                if not isinstance(name, str):
                    raise SourceProblem(f"{path}.plugins.{point}.enabled.{k}", f"expected a plugin name, not {name!r}")
                if name not in enabled:
                    enabled.append(name)
        for point, found in plugins.items():
            if point not in ("balance", "deschedule") and found:
                notes.add(Note.unsupported(f"{path}.plugins.{point}", "rebalancer's protections filter every "
                                           "eviction and its strategies order the pods: not imported"))  # fmt: skip
        for name in args:
            if name not in enabled and name != "DefaultEvictor":
                notes.add(Note.unsupported(f"{path}.pluginConfig.{name}", "configured but not enabled in plugins: "
                                           "the descheduler does not run it either"))  # fmt: skip
        profiles.append(Profile(str(profile.get("name") or f"profile-{i}"), path, args, tuple(enabled)))
    return tuple(profiles)


def _profiles_v1alpha1(policy: Mapping[str, Any], prefix: str, notes: Notes) -> tuple[Profile, ...]:
    evictor_top = {k: policy[k] for k in TOP_LEVEL_EVICTOR_V1ALPHA1 if k in policy}
    profiles = []
    for name, raw in mapping(policy.get("strategies"), f"{prefix}strategies").items():
        path = f"{prefix}strategies.{name}"
        strategy = mapping(raw, path)
        enabled = strategy.get("enabled", False)
        if not isinstance(enabled, bool):
            raise SourceProblem(f"{path}.enabled", f"expected true or false, not {enabled!r}")
        if not enabled:
            why = "enabled: false" if "enabled" in strategy else "no enabled: true"
            notes.add(Note.unsupported(path, f"{why}: the descheduler does not run it, so neither does rebalancer"))
            continue
        params = dict(mapping(strategy.get("params"), f"{path}.params"))
        if "thresholdPriority" in params and "thresholdPriorityClassName" in params:
            raise SourceProblem(f"{path}.params.thresholdPriority", BOTH_THRESHOLDS)
        evictor = dict(evictor_top)
        for key in ("nodeFit", "labelSelector"):
            if key in params:
                evictor[key] = params.pop(key)
        if "thresholdPriority" in params:
            evictor["priorityThreshold"] = {"value": params.pop("thresholdPriority")}
        if "thresholdPriorityClassName" in params:
            evictor["priorityThreshold"] = {"name": params.pop("thresholdPriorityClassName")}
        args = dict(mapping(params.pop("nodeResourceUtilizationThresholds", None), f"{path}.params"))
        if "namespaces" in params:
            args["evictableNamespaces"] = params.pop("namespaces")
        args.update(params)
        profiles.append(Profile(str(name), path, {"DefaultEvictor": evictor, str(name): args}, (str(name),), True))
    return tuple(profiles)


def mapping(value: object, path: str) -> Mapping[str, Any]:
    """A YAML mapping, or {} for an absent value; SourceProblem otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SourceProblem(path, f"expected a mapping, not {type(value).__name__}")
    return value


def sequence(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SourceProblem(path, f"expected a list, not {type(value).__name__}")
    return value
