"""`report` and `predict` through the command line against a real API server (the nodes made through it by api_made.py),
with nothing listening where the policy says Prometheus is: exit 3 and one line saying so, nothing printed as
figures. With no efficiency records in the cluster, `report` says there are none yet instead of a table of zeros."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.app.cli import main
from tests.adapters.prom_fixture import free_port
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made

POLICY = (
    "prometheus: {{url: '{url}'}}\n"
    "strategies:\n- {{kind: LowNodeUtilization, thresholds: {{cpu: 20}}, targetThresholds: {{cpu: 70}}}}\n"
    "state: {{namespace: rebalancer}}\n"
    "{extra}"
)


def write_policy(path: Path, extra: str = "") -> tuple[Path, str]:
    url = f"http://127.0.0.1:{free_port()}"  # nothing is started there: connection refused
    path.write_text(POLICY.format(url=url, extra=extra))
    return path, url


@pytest.fixture
def cluster(api_cluster: ControlPlane) -> ControlPlane:
    api_made.add(api_cluster, b.node("n1", cpu="4", memory="16Gi"), b.node("n2", cpu="4", memory="16Gi"))
    return api_cluster


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_report_with_prometheus_unreachable_exits_3_in_one_line(
    cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, url = write_policy(tmp_path / "p.yaml")
    code, out, err = run(capsys, "report", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig))
    assert (code, out) == (3, "")
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot reach Prometheus at {url}" in err


def test_predict_with_prometheus_unreachable_exits_3_in_one_line(
    cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, url = write_policy(tmp_path / "p.yaml")
    code, out, err = run(
        capsys, "predict", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--progress", "never"
    )
    assert (code, out) == (3, "")
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot reach Prometheus at {url}" in err


def test_report_without_records_says_so_instead_of_zeros(
    cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, _ = write_policy(tmp_path / "p.yaml", "efficiency: {reference: {query: null}}\n")
    code, out, err = run(capsys, "report", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig))
    assert (code, out) == (0, "")
    assert err == (
        "rebalancer report: no records yet in ConfigMap rebalancer/rebalancer-efficiency: "
        "each cycle of serve or run --once adds to them\n"
    )
    code, out, err = run(
        capsys, "report", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--output", "json"
    )
    assert code == 0 and "no records yet" in err
    assert json.loads(out)["pools"]  # JSON keeps its shape for scripts


def test_report_with_records_off_says_why_there_are_none(
    cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, _ = write_policy(tmp_path / "p.yaml", "efficiency: {enabled: false, reference: {query: null}}\n")
    code, out, err = run(capsys, "report", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig))
    assert (code, out) == (0, "")
    assert "efficiency.enabled is false" in err
