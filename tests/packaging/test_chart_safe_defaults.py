"""The chart's first install is safe: a server-side dry run, no made-up image, the monitoring stack and
rebalancer's own pods never evicted, and thresholds above their targets refused at install."""

from __future__ import annotations

import helm_python as helm
import pytest
import yaml

from rebalancer.planning.protections import Protections
from rebalancer.policy import parse_policy
from tests.builders import pod
from tests.packaging.chart import NAMESPACE, Doc, render, validate_schema

MONITORING_POD_SELECTOR = {
    "matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In", "values": ["prometheus", "alertmanager"]}]
}


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_defaults_are_a_server_side_dry_run(kind: str) -> None:
    rendered = render({"kind": kind})
    args = rendered.container["args"]
    assert "--dry-run=server" in args
    assert "DRY RUN" in rendered.notes


def test_the_image_repository_is_required_naming_the_value() -> None:
    with pytest.raises(helm.HelmValuesError) as failure:
        render({}, image=False)
    assert "at '/image': missing property 'repository'" in str(failure.value)
    with pytest.raises(helm.HelmValuesError, match="/image/repository"):
        render({"image": {"repository": ""}}, image=False)


def test_defaults_protect_the_monitoring_stack_and_the_release() -> None:
    rendered = render(namespace="ops")
    policy = yaml.safe_load(rendered.policy_text)
    protections = policy["protections"]
    assert protections["evictableNamespaces"] == {"exclude": ["kube-system", "monitoring", "ops"]}
    assert protections["protectedLabelSelector"] == MONITORING_POD_SELECTOR
    settings = parse_policy(rendered.policy_text).protections
    guard = Protections.from_settings(settings)
    prometheus = pod("prometheus-k8s-0", "n1", namespace="shop", labels={"app.kubernetes.io/name": "prometheus"})
    own = pod("rebalancer-7d9", "n1", namespace="ops")
    shop = pod("api-0", "n1", namespace="shop", labels={"app.kubernetes.io/name": "api"})
    assert guard.reason(prometheus) is not None
    assert guard.reason(own) is not None
    assert guard.reason(shop) is None


def test_the_policys_own_protections_are_kept_and_completed() -> None:
    mine = {"matchLabels": {"tier": "critical"}}
    policy = yaml.safe_load(
        render(
            {"policy": {"protections": {"evictableNamespaces": {"exclude": ["batch"]}, "protectedLabelSelector": mine}}}
        ).policy_text
    )
    # the policy's exclude list, and whatever it lists, kube-system, protect.namespaces and the release's
    assert policy["protections"]["evictableNamespaces"] == {
        "exclude": ["batch", "kube-system", "monitoring", NAMESPACE]
    }
    assert policy["protections"]["protectedLabelSelector"] == mine
    off = yaml.safe_load(render({"protect": {"namespaces": [], "monitoringPods": False}}).policy_text)
    assert off["protections"] == {"evictableNamespaces": {"exclude": ["kube-system", NAMESPACE]}}
    emptied = {"policy": {"protections": {"evictableNamespaces": {"exclude": []}}}, "protect": {"namespaces": []}}
    assert yaml.safe_load(render(emptied).policy_text)["protections"]["evictableNamespaces"] == {
        "exclude": ["kube-system", NAMESPACE]
    }


def test_an_include_list_replaces_exclude_and_may_not_name_a_protected_namespace() -> None:
    policy = yaml.safe_load(
        render({"policy": {"protections": {"evictableNamespaces": {"include": ["shop"]}}}}).policy_text
    )
    assert policy["protections"]["evictableNamespaces"] == {"include": ["shop"]}
    parse_policy(yaml.safe_dump(policy))
    for namespace in ("kube-system", "monitoring", NAMESPACE):
        with pytest.raises(helm.HelmError, match=f'include: lists "{namespace}"'):
            render({"policy": {"protections": {"evictableNamespaces": {"include": ["shop", namespace]}}}})


def strategy(**fields: object) -> Doc:
    return {"policy": {"strategies": [{"kind": "LowNodeUtilization", **fields}]}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            strategy(thresholds={"cpu": 80}, targetThresholds={"cpu": 70}),
            "policy.strategies.0.thresholds.cpu: 80 must not be above targetThresholds.cpu (70)",
        ),
        (
            strategy(
                thresholds={"cpu": 20},
                targetThresholds={"cpu": 70},
                pools={"gpu": {"thresholds": {"cpu": 50}, "targetThresholds": {"cpu": 40}}},
            ),
            "policy.strategies.0.pools.gpu.thresholds.cpu: 50 must not be above targetThresholds.cpu (40)",
        ),
        (
            {"policy": {"strategies": [{"kind": "HighNodeUtilization", "thresholds": {"cpu": 75}}]}},
            "policy.strategies.0.thresholds.cpu: 75 must not be above targetThresholds.cpu (70)",
        ),
    ],
    ids=["strategy", "pool", "hnu-default-target"],
)
def test_thresholds_above_their_targets_fail_at_install(values: Doc, message: str) -> None:
    validate_schema(values)  # each number is fine on its own
    with pytest.raises(helm.HelmError) as failure:
        render(values)
    assert message in str(failure.value)


def test_deviation_thresholds_may_exceed_their_targets() -> None:
    values = strategy(
        thresholds={"cpu": 20},
        targetThresholds={"cpu": 10},
        useDeviationThresholds=True,
        pools={"gpu": {"thresholds": {"cpu": 30}, "targetThresholds": {"cpu": 60}, "useDeviationThresholds": False}},
    )
    parse_policy(render(values).policy_text)
