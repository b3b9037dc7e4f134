"""The policies compared side by side, each a production :class:`Policy` plus the usage it is fed (pure).

Every variant runs the production LowNodeUtilization strategies, limiters and evictor of one base policy;
they differ in what "usage" the snapshot carries, in ``classifyBy``, in ``predictPlacement`` (where the
planner expects a replacement to land) and in the landing guard (taints that steer replacements away):

* ``none``: no rebalancing (the reference for every other row).
* ``requests-lnu``: the community descheduler's LowNodeUtilization, which classifies nodes by the
  *requests* of their pods: the snapshot's node usage is its pods' CPU requests, a pod's usage its request.
* ``instant-lnu``: the descheduler's Prometheus mode: one instant value per node (the last sample, no
  window statistic) and no per-pod usage; a pod is credited with the node's instant usage in proportion to
  its CPU request (a documented modelling choice: that mode has no figure of its own for a pod).
  Both descheduler variants run without placement prediction, as the descheduler does.
* ``current-unguarded``: rebalancer's P95 window per node and pod, ``predictPlacement: false`` and no
  landing guard: any cold node with room is enough, the scheduler places the replacement where it will
  (the "before" of the landing-control comparison).
* ``current-predicted``: the same with ``predictPlacement: true`` (the default): a pod is only evicted when
  the scheduler model sends its replacement to a cold node with room.
* ``current-guard``: ``current-unguarded`` with the landing guard on every pool (the base policy's
  ``landingGuard`` when it sets one, else the defaults): hot and relieved nodes carry the guard's taint.
* ``current-predicted-guard``: both (the "after" of the landing-control comparison). Placement prediction sees the guard's
  taints through the scheduler model, as it does in production.
* ``predictive``: ``current-predicted`` with ``classifyBy: max`` (the higher of the current window and the
  predictor's next daily peak, from the simulation's own history of the pods).
* ``current-ideal``: ``current-unguarded`` with every replacement bound on the node the plan counted room on
  (when its filters allow): not something the default scheduler does, the upper bound of landing control.

To compare another mechanism, add a :class:`Variant` with the ``overrides`` its policy needs (any policy
field, in the YAML's spelling) to :data:`VARIANTS`, or pass a list to
:func:`rebalancer.simulate.engine.simulate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    predict_placement: bool | None = None  # every LowNodeUtilization's predictPlacement (None: as the policy says)
    guard: bool = False  # the landing guard: the base policy's landingGuard, or its defaults on every pool
    overrides: Mapping[str, Any] = field(default_factory=dict)  # merged into the policy (YAML spelling)


VARIANTS: tuple[Variant, ...] = (
    Variant("none", "no rebalancing", None),
    Variant("requests-lnu", "LowNodeUtilization on requests (descheduler)", "requests", predict_placement=False),
    Variant("instant-lnu", "LowNodeUtilization on one instant node value (descheduler Prometheus mode)", "instant",
            predict_placement=False),
    Variant("current-unguarded", "rebalancer: P95 window, no placement prediction, no guard", "window",
            predict_placement=False),
    Variant("current-predicted", "rebalancer: P95 window, placement prediction (the default)", "window",
            predict_placement=True),
    Variant("current-guard", "rebalancer: P95 window, landing guard, no placement prediction", "window",
            predict_placement=False, guard=True),
    Variant("current-predicted-guard", "rebalancer: P95 window, placement prediction and landing guard",
            "window", predict_placement=True, guard=True),
    Variant("predictive", "rebalancer: classifyBy max (window and predicted peak), placement prediction", "window",
            "max", predict_placement=True),
    Variant("current-ideal", "rebalancer unguarded, replacements land where planned (upper bound)", "window",
            ideal_placement=True, predict_placement=False),
)  # fmt: skip
BEFORE, AFTER = "current-unguarded", "current-predicted-guard"  # the landing-control comparison


def variant_named(name: str) -> Variant:
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ConfigError("--variant", [("", f"unknown variant {name!r}; known: {', '.join(v.name for v in VARIANTS)}")])


def variant_policy(base: Policy, variant: Variant, pools: Sequence[str] = ()) -> Policy:
    """The base policy with the variant's overrides, every LowNodeUtilization set to its ``classifyBy`` (and
    ``predictPlacement`` when the variant sets it). The landing guard: off unless the variant has one; then
    the base policy's ``landingGuard`` when it guards some pool, else the defaults on each of ``pools`` (the
    pools the simulated nodes belong to)."""
    data = base.model_dump(by_alias=True, exclude_unset=False)
    if not variant.guard:
        data["landingGuard"] = {"pools": []}
    elif not base.landing_guard.enabled:
        data["landingGuard"] = {"pools": [{"pool": pool} for pool in sorted(set(pools))]}
    _merge(data, dict(variant.overrides))
    for strategy in data["strategies"]:
        if strategy.get("kind") == "LowNodeUtilization":
            strategy["classifyBy"] = variant.classify_by
            if variant.predict_placement is not None:
                strategy["predictPlacement"] = variant.predict_placement
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
