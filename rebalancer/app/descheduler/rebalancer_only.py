"""What an imported policy does that the descheduler did not, through rebalancer's own defaults (pure).

Every such behaviour is a note "imported with a difference", with the setting that restores the
descheduler's where there is one; the defaults are read from the policy's own models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rebalancer.app.descheduler.notes import Note
from rebalancer.domain.settings.efficiency import EfficiencySettings
from rebalancer.domain.settings.shared import PrometheusSettings, format_duration
from strategies.base import StrategySettings


def rebalancer_only(strategies: Sequence[dict[str, Any]]) -> list[Note]:
    """The notes on the imported ``strategies`` (policy data) and the defaults they run with."""
    notes: list[Note] = []
    if not all("schedule" in s for s in strategies):
        every = StrategySettings.model_fields["schedule"].get_default(call_default_factory=True)
        notes.append(Note.differs("schedule", f"a DeschedulerPolicy has none: `rebalancer serve` runs each strategy "
                                  f"every {format_duration(every.interval)} (schedule.interval); `run --once` runs "
                                  "when its CronJob starts it"))  # fmt: skip
    efficiency = EfficiencySettings()
    if efficiency.enabled and efficiency.bounce_back_guard:
        notes.append(Note.differs("efficiency.bounceBackGuard", "true: a pod of a workload created after that "
                                  "workload had a pod evicted within "
                                  f"{format_duration(efficiency.bounce_back_memory)} (efficiency.bounceBackMemory) "
                                  "is not evicted (most likely the replacement, just moved), where the descheduler "
                                  "evicts it again; set efficiency.bounceBackGuard: false for the descheduler's "
                                  "behaviour"))  # fmt: skip
    if any(s["classifyBy"] == "current" for s in strategies):
        prometheus = PrometheusSettings()
        notes.append(Note.differs("classifyBy current", f"a node's usage is the {prometheus.quantile} quantile over "
                                  f"the last {format_duration(prometheus.window)} (prometheus.quantile, window), "
                                  "less what rebalancer moved off it and plus what landed there until that window "
                                  "shows the move, where the descheduler reads the metrics' latest value"))  # fmt: skip
    return notes
