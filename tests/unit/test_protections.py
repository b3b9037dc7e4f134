from __future__ import annotations

import pytest

from rebalancer.domain.settings.shared import ProtectionSettings
from rebalancer.planning.protections import Protections
from tests.builders import pod


def protections(**kwargs) -> Protections:
    return Protections.from_settings(ProtectionSettings.model_validate(kwargs))


@pytest.mark.parametrize(
    ("settings", "overrides", "expected"),
    [
        ({}, {}, None),
        ({}, {"phase": "Pending"}, "not running (phase Pending)"),
        ({"evictableNamespaces": {"include": ["prod"]}}, {}, "namespace default not in evictableNamespaces.include"),
        ({}, {"namespace": "kube-system"}, "namespace kube-system in evictableNamespaces.exclude"),
        (
            {"evictableNamespaces": {"exclude": ["batch"]}},
            {"namespace": "kube-system"},
            "namespace kube-system: protec",
        ),
        ({"evictableNamespaces": {"exclude": []}}, {"namespace": "kube-system"}, "namespace kube-system: protected"),
        ({"evictableNamespaces": {"include": ["kube-system"]}}, {"namespace": "kube-system"}, None),
        ({"labelSelector": {"matchLabels": {"tier": "batch"}}}, {}, "does not match labelSelector"),
        ({"protectedLabelSelector": {"matchLabels": {"app": "web"}}}, {}, "matches protectedLabelSelector"),
        ({"priorityThreshold": 100}, {"priority": 100}, "priority 100 >= priorityThreshold 100"),
        ({"protectedPriorityClasses": ["gold"]}, {"priority_class": "gold"}, "priority class gold is protected"),
        ({"evictPodsWithPVC": False}, {"volumes": ["persistentVolumeClaim"]}, "mounts a PersistentVolumeClaim"),
        ({"evictLocalStoragePods": True}, {"volumes": ["emptyDir", "hostPath"]}, None),
        ({}, {"volumes": ["hostPath"]}, "local storage (hostPath)"),
        ({}, {"workload": None, "owner_kind": "Node"}, "static pod (owned by its Node)"),
        ({}, {"annotations": {"kubernetes.io/config.mirror": "x"}}, "mirror pod of a static pod"),
    ],
)
def test_rules(settings, overrides, expected):
    why = protections(**settings).reason(pod("p", "n1", **overrides))
    if expected is None:
        assert why is None
    else:
        assert why is not None and why.startswith(expected), why


def test_opt_in_overrides_risk_rules_but_not_safety_rules():
    p = protections(priorityThreshold=10)
    opt_in = {"descheduler.alpha.kubernetes.io/evict": "true"}
    assert p.reason(pod("a", "n", priority=50, annotations=opt_in)) is None
    assert p.reason(pod("b", "n", workload=None, annotations=opt_in)) is None
    assert p.reason(pod("c", "n", kind="DaemonSet", annotations=opt_in)) == "DaemonSet pod"
    assert p.reason(pod("d", "n", namespace="kube-system", annotations=opt_in)) is not None
    assert p.reason(pod("e", "n", priority=2_000_000_000, annotations=opt_in)) is not None


def test_own_annotation_opts_in_and_out():
    p = protections()
    assert p.reason(pod("a", "n", workload=None, annotations={"rebalancer.io/evict": "true"})) is None
    assert p.reason(pod("b", "n", annotations={"rebalancer.io/evict": "false"})).startswith("opted out")


def test_descheduler_opt_in_can_be_ignored():
    p = protections(honorDeschedulerOptIn=False)
    assert p.reason(pod("a", "n", workload=None, annotations={"descheduler.alpha.kubernetes.io/evict": ""}))


def test_opt_out_is_case_insensitive_like_opt_in():
    p = protections()
    assert p.reason(pod("a", "n", annotations={"rebalancer.io/evict": "False"})).startswith("opted out")
