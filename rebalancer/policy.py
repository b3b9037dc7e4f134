"""The whole policy file: shared settings plus a discriminated union of strategy arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from rebalancer.errors import ConfigError
from rebalancer.limits import LimitSettings
from rebalancer.settings import FieldProblems, Model, PoolSettings, PrometheusSettings, ProtectionSettings
from strategies import REGISTRY, AnyStrategySettings

API_VERSION: Literal["rebalancer.io/v1alpha1"] = "rebalancer.io/v1alpha1"


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


class Policy(Model):
    """A rebalancer policy (strategy YAML)."""

    api_version: Literal["rebalancer.io/v1alpha1"] = Field(default=API_VERSION, description="Policy format.")
    kind: Literal["RebalancerPolicy"] = Field(default="RebalancerPolicy", description="Always RebalancerPolicy.")
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings, description="Where usage comes from.")
    pools: PoolSettings = Field(default_factory=PoolSettings, description="How nodes form resource pools.")
    protections: ProtectionSettings = Field(
        default_factory=ProtectionSettings, description="Pods that are never evicted."
    )
    strategies: tuple[AnyStrategySettings, ...] = Field(min_length=1, description="Strategies, run in order.")
    limits: LimitSettings = Field(
        default_factory=LimitSettings, description="Rate limiters, caps, time windows and lists (the evictor)."
    )
    state: StateSettings = Field(default_factory=StateSettings, description="Where limiter state is kept.")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Validate policy YAML; raise ConfigError with one (field.path, message) per problem."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [("", f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "the policy must be a YAML mapping")])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc)) from exc


def load_policy(path: str | Path) -> Policy:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read: {exc.strerror or exc}")]) from exc
    return parse_policy(text, str(path))


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """Pydantic errors as (dotted.path, message), without the union's internal tag in the path."""
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
        problems.append((".".join(parts), error["msg"].removeprefix("Value error, ")))
    return problems
