"""The efficiency reference against a real Prometheus, with memory: CPU alone by default, the union of the CPU
and memory filters when some strategy has memory thresholds, and unknown (never zero hot nodes) when the
memory inputs are missing.

Three nodes of 4 cores and 8 GiB over an hour: cpu-hot (a pod using 3.5 cores), mem-hot (a pod holding
7 GiB, little CPU) and cool."""

from __future__ import annotations

import pytest

from rebalancer.adapters.prom.reference import ReferenceSource
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.settings.efficiency import ReferenceSettings
from rebalancer.domain.settings.shared import PrometheusSettings
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.cadvisor_memory import GiB, MiB, memory_series
from tests.adapters.prom_fixture import PrometheusServer, Series, StartPrometheus

pytestmark = pytest.mark.prometheus

END = 1_700_000_000.0
START = END - 3600
HISTORY = CadvisorHistory(
    nodes=(NodeSpec("cpu-hot", 0.25), NodeSpec("mem-hot", 0.25), NodeSpec("cool", 0.25)),
    pods=(
        PodSpec("shop", "busy", "cpu-hot", (Container("app", constant(3.5)),)),
        PodSpec("shop", "cache", "mem-hot", (Container("app", constant(0.2)),)),
        PodSpec("shop", "web", "cool", (Container("app", constant(0.5)),)),
    ),
    start=START,
    end=END,
)
POD_BYTES = {("shop", "busy"): GiB, ("shop", "cache"): 7 * GiB, ("shop", "web"): 2 * GiB}
SYSTEM_BYTES = dict.fromkeys(("cpu-hot", "mem-hot", "cool"), 512 * MiB)


def allocatable() -> list[Series]:
    stamps = [START + 30 * i for i in range(121)]
    return [
        Series(
            "kube_node_status_allocatable",
            {"job": "kube-state-metrics", "node": node.name, "resource": resource, "unit": unit},
            [(t, value) for t in stamps],
            kind="gauge",
        )
        for node in HISTORY.nodes
        for resource, unit, value in (("cpu", "core", 4.0), ("memory", "byte", float(8 * GiB)))
    ]


@pytest.fixture(scope="module")
def prom(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus([*HISTORY.series(), *memory_series(HISTORY, POD_BYTES, SYSTEM_BYTES), *allocatable()])


def hot_minutes(url: str, *, memory: bool, reference: ReferenceSettings | None = None) -> dict[str, float]:
    settings = PrometheusSettings(url=url)
    with ReferenceSource(settings, reference or ReferenceSettings(), memory=memory) as source:
        return source.hot_minutes(END - 1800, END)


def test_cpu_alone_without_memory_thresholds(prom: PrometheusServer) -> None:
    minutes = hot_minutes(prom.url, memory=False)
    assert set(minutes) == {"cpu-hot"}
    assert minutes["cpu-hot"] >= 29.0


def test_memory_hot_nodes_count_with_memory_thresholds(prom: PrometheusServer) -> None:
    minutes = hot_minutes(prom.url, memory=True)
    assert set(minutes) == {"cpu-hot", "mem-hot"}
    assert minutes["mem-hot"] >= 29.0 and minutes["cpu-hot"] == hot_minutes(prom.url, memory=False)["cpu-hot"]


def test_a_null_memory_query_keeps_cpu_alone(prom: PrometheusServer) -> None:
    assert set(hot_minutes(prom.url, memory=True, reference=ReferenceSettings(memory_query=None))) == {"cpu-hot"}


def test_missing_memory_inputs_leave_the_reference_unknown(prom: PrometheusServer) -> None:
    absent = ReferenceSettings(
        memory_data_query='count by ({pod_node_label}) (kube_node_status_allocatable{{resource="gpu"}})'
    )
    with pytest.raises(MetricsStale, match=r"unknown, not zero; reference: efficiency.reference.query or memoryQuery"):
        hot_minutes(prom.url, memory=True, reference=absent)
    assert set(hot_minutes(prom.url, memory=False, reference=absent)) == {"cpu-hot"}  # not in use without memory
