"""The strategy contract: a pure function from snapshot to plan, with its own settings model."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import Field, model_validator

from rebalancer.domain.settings.cron import cron_problems
from rebalancer.domain.settings.shared import Duration, FieldProblems, Model
from rebalancer.planning.plan import NodeDecision, StrategyResult
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot


class Schedule(Model):
    """When ``rebalancer serve`` runs a strategy: every ``interval``, or on a ``cron`` expression."""

    interval: Duration | None = Field(default=None, description="For example 5m.")
    cron: str | None = Field(default=None, description="Five-field crontab, in service.timeZone.")

    @model_validator(mode="after")
    def _one(self) -> Schedule:
        if (self.interval is None) == (self.cron is None):
            raise FieldProblems([("interval", "set exactly one of interval and cron")])
        if self.cron is not None and (problems := cron_problems(self.cron)):
            raise FieldProblems([("cron", problem) for problem in problems])
        return self


class StrategySettings(Model):
    """Fields every strategy accepts; subclasses add a ``kind`` literal and their arguments."""

    enabled: bool = Field(default=True, description="Disabled strategies are validated but not run.")
    schedule: Schedule = Field(
        default_factory=lambda: Schedule(interval="5m"), description="When `serve` runs it (default every 5m)."
    )

    def reads_memory_usage(self) -> bool:
        """The strategy needs the memory working set read from Prometheus (memory thresholds)."""
        return False

    def other_resources(self) -> frozenset[str]:
        """The resources besides CPU its thresholds name (memory, pods)."""
        return frozenset()


def percentage_of_nodes_to_score_field() -> Any:
    """The ``percentageOfNodesToScore`` setting of the strategies that predict placement."""
    return Field(
        default=None,
        ge=0,
        le=100,
        description="With predictPlacement: the cluster scheduler's percentageOfNodesToScore (its "
        "KubeSchedulerConfiguration), how many of the feasible nodes it scores before choosing. Unset or 0: the "
        "scheduler's adaptive default (50% minus 1% per 125 nodes, at least 5% and at least 100 nodes); 100: "
        "every node. Below 100 nodes every node is scored whatever the setting.",
    )


class Strategy(Protocol):
    """Receives an immutable snapshot, returns planned evictions and their decision record.

    No I/O, no clock, no eviction: ``snapshot.taken_at`` is the only notion of time.
    """

    @property
    def name(self) -> str: ...

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult: ...


@runtime_checkable
class ReadsPodMemory(Protocol):
    """A strategy that weighs its candidates' memory: a live cycle reads the pods' memory only on the nodes
    it names, after the snapshot is made (at 150,000 pods the whole answer is as large as the CPU one)."""

    def memory_sources(self, snapshot: ClusterSnapshot) -> frozenset[str]: ...


@runtime_checkable
class ClassifiesNodes(Protocol):
    """A strategy whose landing prediction weighs the landing guard's marks: the guard decides its marks on
    the classes this gives (the hot nodes being those the plan may relieve) before the strategy plans."""

    def node_decisions(self, snapshot: ClusterSnapshot) -> tuple[NodeDecision, ...]: ...
