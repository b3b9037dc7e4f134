"""The strategy contract: a pure function from snapshot to plan, with its own settings model."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from rebalancer.plan import StrategyResult
from rebalancer.protections import Protections
from rebalancer.settings import Model
from rebalancer.snapshot import ClusterSnapshot


class StrategySettings(Model):
    """Fields every strategy accepts; subclasses add a ``kind`` literal and their arguments."""

    enabled: bool = Field(default=True, description="Disabled strategies are validated but not run.")


class Strategy(Protocol):
    """Receives an immutable snapshot, returns planned evictions and their decision record.

    No I/O, no clock, no eviction: ``snapshot.taken_at`` is the only notion of time.
    """

    @property
    def name(self) -> str: ...

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult: ...
