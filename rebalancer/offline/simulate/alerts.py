"""The alert path of an alert-driven variant (pure): the Prometheus rule's pending and firing states per
node, Alertmanager's notifications (one group per node: ``group_wait``, ``group_interval``,
``repeat_interval``), and serve's triage of the webhook's alerts (a node handled less than
``service.webhook.alertNodeCooldown`` ago is dropped, as ``Runner.submit_alerts`` does). Every event within
a step happens at that step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rebalancer.offline.simulate.alert_rule import AlertRule
from rebalancer.offline.simulate.readings import NodeSamples


@dataclass(slots=True)
class _Group:
    next_flush: float
    notified_at: float | None = None  # the last firing notification (None: none since the group began)


class AlertPath:
    """``threshold_m``: per node, the usage above which the rule's expression holds (millicores)."""

    def __init__(
        self, rule: AlertRule, threshold_m: npt.NDArray[np.float64], step_seconds: int, cooldown_seconds: float
    ) -> None:
        self.rule, self.threshold_m, self.step, self.cooldown = rule, threshold_m, step_seconds, cooldown_seconds
        self.samples = NodeSamples(len(threshold_m), max(1, rule.rate_window_seconds // step_seconds))
        self.active_since = np.full(len(threshold_m), np.nan)  # when the expression last turned true
        self.groups: dict[int, _Group] = {}
        self.handled_at: dict[int, float] = {}
        self.notifications = 0  # firing notifications sent to the webhook
        self.dropped = 0  # of those, dropped by serve because the node was handled less than the cooldown ago

    def firing(self, now: float, usage: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        """The rule evaluated at ``now`` on this step's real node usage: firing per node."""
        self.samples.add(usage)
        above = self.samples.mean() > self.threshold_m
        self.active_since = np.where(above, np.where(np.isnan(self.active_since), now, self.active_since), np.nan)
        out: npt.NDArray[np.bool_] = above & (now - np.nan_to_num(self.active_since, nan=now) >= self.rule.for_seconds)
        return out

    def step_at(self, now: float, usage: npt.NDArray[np.float64]) -> frozenset[int]:
        """The nodes serve queues for a focused cycle at ``now`` (empty: no cycle)."""
        firing = self.firing(now, usage)
        for index in np.flatnonzero(firing):
            self.groups.setdefault(int(index), _Group(now + self.rule.group_wait_seconds))
        notified = []
        for node, group in list(self.groups.items()):
            if group.next_flush >= now + self.step:
                continue
            group.next_flush += self.rule.group_interval_seconds
            if not firing[node]:
                del self.groups[node]  # resolved: serve records it, nothing else; the group ends
            elif group.notified_at is None or now - group.notified_at >= self.rule.repeat_interval_seconds:
                group.notified_at = now
                notified.append(node)
        self.notifications += len(notified)
        queued = frozenset(n for n in notified if now - self.handled_at.get(n, -np.inf) >= self.cooldown)
        self.dropped += len(notified) - len(queued)
        return queued

    def handled(self, nodes: frozenset[int], now: float) -> None:
        for node in nodes:
            self.handled_at[node] = now
