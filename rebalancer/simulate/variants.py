"""The policies compared side by side, each a production :class:`Policy` plus the usage it is fed (pure).

Every variant runs the production LowNodeUtilization strategies, limiters and evictor of one base policy;
they differ only in what "usage" the snapshot carries and in ``classifyBy``:

* ``none``: no rebalancing (the reference for every other row).
* ``requests-lnu``: the community descheduler's LowNodeUtilization, which classifies nodes by the
  *requests* of their pods: the snapshot's node usage is its pods' CPU requests, a pod's usage its request.
* ``instant-lnu``: the descheduler's Prometheus mode: one instant value per node (the last sample, no
  window statistic) and no per-pod usage; a pod is credited with the node's instant usage in proportion to
  its CPU request (a documented modelling choice: that mode has no figure of its own for a pod).
* ``current``: rebalancer as shipped: P95 over ``prometheus.window`` per node and per pod.
* ``predictive``: the same with ``classifyBy: max`` (the higher of the current window and the predictor's
  next daily peak, from the simulation's own history of the pods).
* ``current-ideal``: ``current`` with every replacement bound on the node the plan counted room on (when
  its filters allow): not something the default scheduler does, the upper bound of landing control.

To compare a new mechanism (a landing guard, placement prediction), add a :class:`Variant` with the
``overrides`` its policy needs (any policy field, in the YAML's spelling) to :data:`VARIANTS`, or pass a
list to :func:`rebalancer.simulate.engine.simulate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from rebalancer.errors import ConfigError
from rebalancer.policy import Policy, validation_problems
from rebalancer.predicted import ClassifyBy

UsageMode = Literal["requests", "instant", "window"]


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    description: str
    usage: UsageMode | None  # None: the policy never runs
    classify_by: ClassifyBy = "current"
    ideal_placement: bool = False  # replacements bound on the node the plan chose (an upper bound, not real)
    overrides: Mapping[str, Any] = field(default_factory=dict)  # merged into the policy (YAML spelling)


VARIANTS: tuple[Variant, ...] = (
    Variant("none", "no rebalancing", None),
    Variant("requests-lnu", "LowNodeUtilization on requests (descheduler)", "requests"),
    Variant("instant-lnu", "LowNodeUtilization on one instant node value (descheduler Prometheus mode)", "instant"),
    Variant("current", "rebalancer: P95 window per node and pod", "window"),
    Variant("predictive", "rebalancer: classifyBy max (window and predicted peak)", "window", "max"),
    Variant("current-ideal", "rebalancer current, replacements land where planned", "window", ideal_placement=True),
)


def variant_named(name: str) -> Variant:
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ConfigError("--variant", [("", f"unknown variant {name!r}; known: {', '.join(v.name for v in VARIANTS)}")])


def variant_policy(base: Policy, variant: Variant) -> Policy:
    """The base policy with the variant's overrides, every LowNodeUtilization set to its ``classifyBy``."""
    data = base.model_dump(by_alias=True, exclude_unset=False)
    _merge(data, dict(variant.overrides))
    for strategy in data["strategies"]:
        if strategy.get("kind") == "LowNodeUtilization":
            strategy["classifyBy"] = variant.classify_by
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"variant {variant.name}", validation_problems(exc)) from exc


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
