"""The hot-node alert of an alert-driven variant and the Alertmanager route that delivers it (pure data)."""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600


@dataclass(frozen=True, slots=True)
class AlertRule:
    """A Prometheus rule "node above the strategy's targetThresholds for ``for_seconds``", evaluated at every
    step, on the node's mean real usage over the last ``rate_window_seconds`` (what ``rate()`` of the CPU
    counters over 5 minutes reads, as the shipped rule's recording rule does); routed by Alertmanager with
    ``group_by: [node]`` (one group per node) and its timers."""

    for_seconds: int = 120
    rate_window_seconds: int = 300
    group_wait_seconds: int = 10  # the README's route; under a step: the first notification goes out at once
    group_interval_seconds: int = 300  # Alertmanager's default
    repeat_interval_seconds: int = 4 * HOUR  # Alertmanager's default: a still-firing alert is sent again after this
