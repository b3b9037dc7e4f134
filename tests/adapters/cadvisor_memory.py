"""cAdvisor-shaped ``container_memory_working_set_bytes`` gauges beside a :class:`CadvisorHistory`.

As for CPU, cAdvisor reports one series per real container, one for the pause container and one pod-level
cgroup series holding their sum; the node's root cgroup (``id="/"``) holds everything plus system daemons.
A pod's working set is given in bytes, spread evenly over its real containers, constant over the history.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.adapters.cadvisor import CadvisorHistory, PodCgroups, node_labels
from tests.adapters.prom_fixture import Series

METRIC = "container_memory_working_set_bytes"
PAUSE_BYTES = 600 * 1024
MiB = 2**20
GiB = 2**30


def memory_series(
    history: CadvisorHistory, pod_bytes: Mapping[tuple[str, str], int], system_bytes: Mapping[str, int]
) -> list[Series]:
    """Working-set gauges of every pod of ``history`` (``pod_bytes`` by (namespace, pod); 0 when absent)
    and of every node's root cgroup (``system_bytes`` by node plus its pods and pause containers)."""
    out: list[Series] = []
    for node in history.nodes:
        base = node_labels(node.name, history.node_label)
        stamps = history.times(node.name)
        pods = [p for p in history.pods if p.node == node.name]
        total = system_bytes.get(node.name, 0)
        for pod in pods:
            whole = pod_bytes.get((pod.namespace, pod.name), 0)
            names = tuple(c.name for c in pod.containers)
            cgroups = PodCgroups.of(base, pod.namespace, pod.name, pod.uid, names)
            share, rest = divmod(whole, len(names))
            for index, labels in enumerate(cgroups.containers):
                out.append(_gauge(labels, share + (rest if index == 0 else 0), stamps))
            out.append(_gauge(cgroups.pause, PAUSE_BYTES, stamps))
            out.append(_gauge(cgroups.whole, whole + PAUSE_BYTES, stamps))
            total += whole + PAUSE_BYTES
        out.append(_gauge({**base, "id": "/"}, total, stamps))
    return out


def node_bytes(
    history: CadvisorHistory, node: str, pod_bytes: Mapping[tuple[str, str], int], system_bytes: Mapping[str, int]
) -> int:
    """What the node's root cgroup reports: system, pods and pause containers."""
    pods = [p for p in history.pods if p.node == node]
    return system_bytes.get(node, 0) + sum(pod_bytes.get((p.namespace, p.name), 0) + PAUSE_BYTES for p in pods)


def _gauge(labels: Mapping[str, str], value: int, stamps: list[float]) -> Series:
    return Series(METRIC, dict(labels), [(t, float(value)) for t in stamps], kind="gauge")
