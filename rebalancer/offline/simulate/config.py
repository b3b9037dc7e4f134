"""What is simulated, apart from the policies (pure, light: the command line builds its options from it)."""

from __future__ import annotations

from dataclasses import dataclass

DAY = 86_400
GI = 2**30


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What is simulated (the policies come from the policy file)."""

    nodes: int = 48
    node_cpu_m: int = 16_000
    node_memory: int = 64 * GI
    max_pods: int = 110
    pods_per_node: int = 24
    max_replicas: int = 6
    days: int = 3  # measured days, after history_days of history (the predictor's window)
    history_days: int = 8
    step_seconds: int = 60
    interval_seconds: int = 600  # one rebalancer cycle every this long
    utilization: float = 0.35  # mean real CPU usage / allocatable over the history days (0.5: pods of the shared
    # sample sized by their VMs then ask more than their nodes have on a third of the node-days)
    request_factor: float = 1.0  # a pod's CPU request = its workload's mean usage over the history x this
    system_cpu_m: int = 300  # kubelet, runtime, daemons on every node
    replacement_delay_seconds: int = 0  # from an eviction to its replacement's binding
    budgets: bool = True  # a PodDisruptionBudget maxUnavailable 1 on every Deployment of 2 or more replicas
    seed: int = 1

    def problems(self) -> list[tuple[str, str]]:
        out = []
        if not 60 <= self.step_seconds <= 300 or DAY % self.step_seconds:
            out.append(("--step", "must be 1 to 5 minutes and divide a day"))
        if self.interval_seconds < self.step_seconds or self.interval_seconds % self.step_seconds:
            out.append(("--interval", "must be a multiple of the step"))
        for name, value in (("--nodes", self.nodes), ("--pods-per-node", self.pods_per_node), ("--days", self.days)):
            if value < 1:
                out.append((name, "must be at least 1"))
        if not 0 < self.utilization < 1:
            out.append(("--utilization", "must be between 0 and 1"))
        return out

    @property
    def steps_per_day(self) -> int:
        return DAY // self.step_seconds
