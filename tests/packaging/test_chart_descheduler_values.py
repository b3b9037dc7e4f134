"""The chart and the descheduler's chart values: a deschedulerPolicy value is refused with the command that
converts it, the converted policy installs, and the pod's priority class defaults as the descheduler's does."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import pytest
import yaml

from rebalancer.app.descheduler import convert
from rebalancer.policy import parse_policy
from tests.packaging.chart import render

DESCHEDULER_VALUES = Path(__file__).resolve().parents[1] / "data" / "descheduler" / "chart-values.yaml"


def test_a_descheduler_policy_value_fails_naming_the_import_command() -> None:
    values = yaml.safe_load(DESCHEDULER_VALUES.read_text())
    given = {"deschedulerPolicy": values["deschedulerPolicy"], "deschedulerPolicyAPIVersion": "descheduler/v1alpha2"}
    with pytest.raises(helm.HelmError) as failure:
        render(given)
    message = str(failure.value)
    assert "deschedulerPolicy:" in message
    assert "rebalancer import-policy" in message and "policy:" in message


def test_the_imported_descheduler_values_install_under_policy() -> None:
    conversion = convert(yaml.safe_load(DESCHEDULER_VALUES.read_text()))
    policy = {k: v for k, v in conversion.policy.items() if k not in ("apiVersion", "kind")}
    rendered = render({"policy": policy})
    loaded = parse_policy(rendered.policy_text)
    assert loaded.strategies[0].kind == "LowNodeUtilization"
    assert loaded.strategies[0].classify_by == "requests"


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_priority_class_defaults_to_system_cluster_critical(kind: str) -> None:
    assert render({"kind": kind}).pod_spec["priorityClassName"] == "system-cluster-critical"
    assert "priorityClassName" not in render({"kind": kind, "priorityClassName": ""}).pod_spec
