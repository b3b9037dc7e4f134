"""Strategies: pure planners over a ClusterSnapshot, registered explicitly by name.

To add one: a module with a settings model (``kind`` literal) and a factory, one line in REGISTRY,
one member in ``AnyStrategySettings``. Nothing is discovered by reflection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from strategies.base import Strategy, StrategySettings
from strategies.deletion_cost import DeletionCostSteering, DeletionCostSteeringSettings
from strategies.high_node_utilization import HighNodeUtilization, HighNodeUtilizationSettings
from strategies.low_node_utilization import LowNodeUtilization, LowNodeUtilizationSettings


@dataclass(frozen=True, slots=True)
class Registration:
    settings: type[StrategySettings]
    factory: Callable[[Any], Strategy]


REGISTRY: dict[str, Registration] = {
    "LowNodeUtilization": Registration(LowNodeUtilizationSettings, LowNodeUtilization),
    "HighNodeUtilization": Registration(HighNodeUtilizationSettings, HighNodeUtilization),
    "DeletionCostSteering": Registration(DeletionCostSteeringSettings, DeletionCostSteering),
}

AnyStrategySettings = Annotated[
    LowNodeUtilizationSettings | HighNodeUtilizationSettings | DeletionCostSteeringSettings,
    Field(discriminator="kind"),
]


def build(
    settings: LowNodeUtilizationSettings | HighNodeUtilizationSettings | DeletionCostSteeringSettings,
) -> Strategy:
    return REGISTRY[settings.kind].factory(settings)


__all__ = ["REGISTRY", "AnyStrategySettings", "Strategy", "StrategySettings", "build"]
