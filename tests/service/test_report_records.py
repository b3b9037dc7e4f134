"""The efficiency records read from the test API server: by `rebalancer report` (the period's end given by
--until, records that cannot be read) and before a cycle plans (records that cannot be read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.adapters.kube import ConfigMapStateStore, connect
from rebalancer.app import cli
from rebalancer.app.efficiency import RECORDS_KEY, EfficiencyRecorder
from rebalancer.domain.model import ClusterFacts
from rebalancer.policy import Policy, parse_policy
from rebalancer.records import EfficiencyState, observe_cycle
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b
from tests.unit.test_efficiency import SETTINGS, T0, evict_all, plan_at, scene

NAMESPACE = "rebalancer"
POLICY = f"""
strategies:
- {{kind: LowNodeUtilization, thresholds: {{cpu: 20}}, targetThresholds: {{cpu: 70}}}}
state: {{namespace: {NAMESPACE}}}
efficiency: {{reference: {{query: null}}}}
"""


def load_policy_text() -> Policy:
    return parse_policy(POLICY)


def recorded(*times: float) -> EfficiencyState:
    """One cycle's records at each of ``times``: hot and stuck found, hot acted on with one eviction."""
    state = EfficiencyState()
    for at in times:
        snap, plan = plan_at(*scene(), at)
        state = observe_cycle(state, snap, plan, evict_all(plan), "schedule", SETTINGS)
    return state


def store_records(server: TestApiServer, text: str) -> None:
    for name in ("hot", "cold", "stuck"):
        server.add(b.node(name, cpu="4", memory="16Gi"))
    server.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "rebalancer-efficiency", "namespace": NAMESPACE},
            "data": {"records.json": text},
        }
    )


def report(kubeconfig: Path, tmp_path: Path, *args: str) -> int:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    return cli.main(["report", "--policy", str(policy), "--kubeconfig", str(kubeconfig), *args])


def test_until_before_the_newest_records_reports_the_period_it_ends(
    kube_server: TestApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_records(kube_server, recorded(T0 - 4 * 3600, T0).to_json())
    assert report(kubeconfig, tmp_path, "--until", str(T0 - 2 * 3600), "--period", "12h", "-o", "json") == cli.EXIT_OK
    captured = capsys.readouterr()
    cluster = json.loads(captured.out)["pools"][0]
    assert cluster["pool"] == "*"
    assert (cluster["found"], cluster["acted"], cluster["evictions"]) == (2, 1, 1)  # the cycle at T0 is after it
    assert "corrupt" not in captured.err and "no records" not in captured.err


def test_corrupt_records_are_named_with_exit_3_not_reported_as_none(
    kube_server: TestApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = recorded(T0).to_json().replace('"reliefs":[', '"reliefs":[5,', 1)
    store_records(kube_server, text)
    assert report(kubeconfig, tmp_path, "--until", str(T0)) == cli.EXIT_SOURCE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "$.reliefs[0]" in captured.err and f"{NAMESPACE}/rebalancer-efficiency" in captured.err
    assert "no records yet" not in captured.err and "afresh" not in captured.err


def test_corrupt_records_turn_the_in_flight_correction_off_and_say_why(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    state = recorded(T0)
    store_records(kube_server, state.to_json().replace('"reliefs":[', '"reliefs":[5,', 1))
    texts = ConfigMapStateStore(connect(str(kubeconfig)), NAMESPACE, "rebalancer-efficiency", RECORDS_KEY)
    recorder = EfficiencyRecorder(texts, SETTINGS, load_policy_text().pools, write=False)
    nodes, pods, _ = scene()
    moved, reliefs = recorder.earlier(ClusterFacts(tuple(nodes), tuple(pods)), T0 + 60)
    assert moved == {} and reliefs.known == ()
    assert reliefs.missing is not None and "$.reliefs[0]" in reliefs.missing  # not "no earlier reliefs"


def test_a_period_reaching_before_the_kept_records_is_refused_naming_it(
    kube_server: TestApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_records(kube_server, recorded(T0 - 3600, T0).to_json())  # the cycles keep 24h (efficiency.period)
    assert report(kubeconfig, tmp_path, "--until", str(T0), "--period", "7d", "-o", "json") == cli.EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""  # not rates whose hot nodes found before the kept day would read as none
    assert "--period: the period starts at 2023-11-07T22:13:20Z" in captured.err
    assert "the cycles keep the records 1d" in captured.err
    assert report(kubeconfig, tmp_path, "--until", str(T0), "--period", "24h", "-o", "json") == cli.EXIT_OK


def test_more_buckets_than_a_report_shows_are_refused_before_anything_is_read(
    kube_server: TestApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_records(kube_server, recorded(T0).to_json())
    before = len(kube_server.requests)
    # 2880 buckets: as many reference reads of Prometheus, table rows and plot points
    assert report(kubeconfig, tmp_path, "--until", str(T0), "--bucket", "30s") == cli.EXIT_CONFIG
    assert "--bucket: 30s cuts the period (1d) into 2880 buckets, more than 2000" in capsys.readouterr().err
    assert len(kube_server.requests) == before
