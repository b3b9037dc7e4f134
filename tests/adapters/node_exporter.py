"""node_exporter-shaped ``node_cpu_seconds_total`` history, labelled as kube-prometheus labels it.

kube-prometheus relabels node_exporter's ``instance`` to the node name, while cAdvisor's series (scraped
through the kubelet) keep ``instance`` as the kubelet's ip:port and name the node in ``node``: a pod filter
on the wrong one of the two matches nothing. Per CPU, one counter per mode: ``user`` carries the busy
share of the node's usage, ``idle`` the rest, ``iowait`` a little that is not busy.
"""

from __future__ import annotations

from tests.adapters.cadvisor import CadvisorHistory, Rate, counter
from tests.adapters.prom_fixture import Series

METRIC = "node_cpu_seconds_total"
IOWAIT = 0.01  # cores per CPU waiting on I/O: not busy, and no node query may count it


def node_exporter_series(history: CadvisorHistory, cpus: int = 4) -> list[Series]:
    """One node_exporter per node of ``history``, its busy CPU equal to the node's root cgroup usage."""
    out: list[Series] = []
    for node in history.nodes:
        busy = history.node_usage(node.name)
        stamps = history.times(node.name)
        base = {"job": "node-exporter", "instance": node.name, "namespace": "monitoring"}
        for cpu in range(cpus):
            shares: dict[str, Rate] = {
                "user": lambda t, busy=busy: busy(t) / cpus,
                "iowait": lambda t: IOWAIT,
                "idle": lambda t, busy=busy: 1.0 - IOWAIT - busy(t) / cpus,
            }
            for mode, rate in shares.items():
                out.append(Series(METRIC, {**base, "cpu": str(cpu), "mode": mode}, counter(rate, stamps)))
    return out
