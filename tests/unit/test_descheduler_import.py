"""`rebalancer import-policy`: each descheduler policy shape of tests/data/descheduler imports to a policy that
passes check-config, maps what has an equivalent, and names everything else in a note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.app.cli import main
from rebalancer.app.descheduler import Conversion, SourceProblem, convert
from rebalancer.app.descheduler.render import policy_yaml
from rebalancer.policy import load_policy, parse_policy

DATA = Path(__file__).resolve().parents[1] / "data" / "descheduler"
FIXTURES = sorted(DATA.glob("*.yaml"))


def imported(name: str) -> Conversion:
    return convert(yaml.safe_load((DATA / name).read_text()))


def paths(conversion: Conversion, kind: str | None = None) -> set[str]:
    return {n.path for n in conversion.notes if kind is None or n.kind == kind}


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_fixture_imports_to_a_valid_policy(fixture: Path):
    conversion = convert(yaml.safe_load(fixture.read_text()))
    policy = parse_policy(policy_yaml(conversion, fixture.name), fixture.name)
    assert policy.strategies
    assert all(s.kind in ("LowNodeUtilization", "HighNodeUtilization") for s in policy.strategies)


def test_low_node_utilization_policy_maps_thresholds_evictor_and_limits():
    conversion = imported("v1alpha2-low-node-utilization.yaml")
    policy = conversion.policy
    assert policy["strategies"] == [
        {
            "kind": "LowNodeUtilization",
            "classifyBy": "requests",
            "predictPlacement": False,
            "thresholds": {"cpu": 20, "memory": 20, "pods": 20},
            "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50},
            "numberOfNodes": 0,
        }
    ]
    assert policy["protections"] == {
        "evictableNamespaces": {"exclude": ["kube-system", "monitoring"]},
        "evictLocalStoragePods": False,
        "evictPodsWithPVC": False,
        "priorityThreshold": 10000,
    }
    assert policy["limits"] == {
        "node": {"maxPerCycle": 2},
        "global": {"maxPerCycle": 10},
        "namespace": {"maxPerCycle": 5},
    }
    unsupported = paths(conversion, "unsupported")
    assert {"profiles.0.RemoveDuplicates", "profiles.0.RemovePodsViolatingInterPodAntiAffinity"} <= unsupported
    assert "profiles.0.LowNodeUtilization.thresholds" not in unsupported  # memory and pods carry over
    assert "profiles.0.DefaultEvictor.nodeFit" in paths(conversion, "differs")
    assert conversion.by_requests


def test_high_node_utilization_fills_destinations_to_allocatable_like_the_descheduler():
    conversion = imported("v1alpha2-high-node-utilization.yaml")
    (strategy,) = conversion.policy["strategies"]
    assert strategy["kind"] == "HighNodeUtilization"
    assert strategy["thresholds"] == {"cpu": 20, "memory": 20}
    assert strategy["targetThresholds"] == {"cpu": 100, "memory": 100}  # the descheduler's: fill to allocatable
    assert strategy["numberOfNodes"] == 1 and strategy["classifyBy"] == "requests"
    assert conversion.policy["protections"]["labelSelector"] == {"matchLabels": {"tier": "batch"}}


def test_metrics_utilization_classifies_by_real_usage():
    conversion = imported("v1alpha2-metrics.yaml")
    (strategy,) = conversion.policy["strategies"]
    assert strategy["classifyBy"] == "current" and not conversion.by_requests
    assert strategy["thresholds"] == {"cpu": 10} and strategy["useDeviationThresholds"] is True
    assert strategy["maxNoOfPodsToEvictPerNode"] == 3  # evictionLimits.node: this strategy's own cap
    assert conversion.policy["prometheus"] == {"url": "http://prometheus-operated.monitoring:9090"}
    assert conversion.policy["protections"] == {"evictPodsWithPVC": False, "evictLocalStoragePods": True}
    selector = conversion.policy["limits"]["lists"]["nodes"]["whiteSelectors"][0]
    assert selector["matchLabels"] == {"node-role.kubernetes.io/worker": ""}
    assert selector["matchExpressions"] == [{"key": "topology.kubernetes.io/zone", "operator": "NotIn",
                                             "values": ["edge"]}]  # fmt: skip
    assert {"gracePeriodSeconds"} <= paths(conversion, "unsupported")
    assert "metricsProviders.0.prometheus.authToken" in paths(conversion, "differs")


def test_evictor_arguments_without_equivalent_are_named():
    conversion = imported("v1alpha2-metrics-server.yaml")
    assert {
        "profiles.0.DefaultEvictor.evictSystemCriticalPods",
        "profiles.0.DefaultEvictor.evictFailedBarePods",
        "profiles.0.DefaultEvictor.minPodAge",
    } <= paths(conversion, "unsupported")
    # a threshold by class name: the class itself stays protected, and the note says what is not
    assert conversion.policy["protections"] == {"protectedPriorityClasses": ["business-critical"]}
    assert "profiles.0.DefaultEvictor.priorityThreshold.name" in paths(conversion, "differs")
    assert "evictableNamespaces" in paths(conversion, "differs")  # kube-system stays excluded, and it says so


def test_v1alpha1_strategy_params_become_protections_and_limits():
    conversion = imported("v1alpha1.yaml")
    policy = conversion.policy
    assert policy["strategies"][0]["thresholds"] == {"cpu": 25, "memory": 25}
    assert policy["strategies"][0]["numberOfNodes"] == 1
    assert policy["protections"]["priorityThreshold"] == 100000
    assert policy["protections"]["evictLocalStoragePods"] is True
    assert policy["protections"]["evictableNamespaces"] == {"exclude": ["kube-system", "ingress"]}
    assert policy["limits"] == {"node": {"maxPerCycle": 3}}
    assert {"strategies.RemoveDuplicates", "strategies.RemovePodsViolatingNodeTaints"} <= paths(conversion)


def test_chart_values_carry_the_schedule_and_name_the_deployment_settings():
    conversion = imported("chart-values.yaml")
    assert conversion.policy["strategies"][0]["schedule"] == {"cron": "*/2 * * * *"}
    assert conversion.policy["protections"] == {"evictPodsWithPVC": False, "evictLocalStoragePods": True}
    chart = next(n for n in conversion.notes if n.path == "chart values" and n.kind == "differs")
    assert "priorityClassName" in chart.message and "resources" in chart.message
    assert (
        "cmdOptions"
        in next(n for n in conversion.notes if n.path == "chart values" and n.kind == "unsupported").message
    )
    older = imported("chart-values-v1alpha1.yaml")
    assert older.policy["strategies"][0]["schedule"] == {"interval": "5m"}


def test_profiles_that_disagree_on_a_protection_keep_the_tighter_and_say_so():
    lnu = {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}}}
    hnu = {"name": "HighNodeUtilization", "args": {"thresholds": {"cpu": 10}}}
    document = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [
            {"name": "a", "pluginConfig": [{"name": "DefaultEvictor", "args": {"ignorePvcPods": False}}, lnu],
             "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}},
            {"name": "b", "pluginConfig": [{"name": "DefaultEvictor", "args": {"ignorePvcPods": True}}, hnu],
             "plugins": {"balance": {"enabled": ["HighNodeUtilization"]}}},
        ],
    }  # fmt: skip
    conversion = convert(document)
    assert [s["kind"] for s in conversion.policy["strategies"]] == ["LowNodeUtilization", "HighNodeUtilization"]
    assert conversion.policy["protections"] == {"evictPodsWithPVC": False}  # b's, though a came first
    assert "profiles.0: evictPodsWithPVC" in paths(conversion, "differs")


def test_every_namespace_protection_of_every_profile_is_kept():
    conversion = imported("v1alpha2-namespaces.yaml")
    protections = conversion.policy["protections"]
    # the strategy's own filter and the DefaultEvictor's both held in the descheduler: monitoring stays protected
    assert protections["evictableNamespaces"] == {"exclude": ["batch", "kube-system", "monitoring"]}
    assert protections["evictLocalStoragePods"] is False  # Pack's evictor kept the descheduler's default
    assert protections["evictPodsWithPVC"] is False and protections["priorityThreshold"] == 5000
    assert protections["labelSelector"] == {"matchLabels": {"tier": "batch"}}
    policy = parse_policy(policy_yaml(conversion, "v1alpha2-namespaces.yaml"))
    assert set(policy.protections.evictable_namespaces.exclude) == {"batch", "kube-system", "monitoring"}
    differs = paths(conversion, "differs")  # each profile bound by the other's protections is named
    assert {"profiles.1: evictableNamespaces", "profiles.0: evictLocalStoragePods", "profiles.0: evictPodsWithPVC",
            "profiles.0: priorityThreshold", "profiles.0: labelSelector"} <= differs  # fmt: skip
    assert not {p for p in differs if p.startswith("profiles.1: ") and "evictLocalStoragePods" in p}


@pytest.mark.parametrize(
    ("strategy", "evictor", "kept"),
    [
        ({"include": ["shop", "web"]}, {"exclude": ["web"]}, {"include": ["shop"]}),
        ({"include": ["shop", "web"]}, {"include": ["web", "batch"]}, {"include": ["web"]}),
        ({"exclude": ["batch"]}, {"include": ["shop", "batch"]}, {"include": ["shop"]}),
        ({"exclude": ["batch"]}, {"exclude": ["kube-system", "batch"]}, {"exclude": ["batch", "kube-system"]}),
    ],
)
def test_namespace_filters_of_a_strategy_and_its_evictor_combine_as_the_descheduler_applies_both(
    strategy: dict[str, list[str]], evictor: dict[str, list[str]], kept: dict[str, list[str]]
):
    lnu = {
        "name": "LowNodeUtilization",
        "args": {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}, "evictableNamespaces": strategy},
    }
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [
        {"name": "p", "pluginConfig": [{"name": "DefaultEvictor", "args": {"namespaces": evictor}}, lnu],
         "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}  # fmt: skip
    assert convert(document).policy["protections"]["evictableNamespaces"] == kept


def test_namespace_filters_that_leave_nothing_evictable_are_refused_with_the_field():
    lnu = {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50},
                                                  "evictableNamespaces": {"include": ["shop"]}}}  # fmt: skip
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [
        {"name": "p", "pluginConfig": [{"name": "DefaultEvictor", "args": {"namespaces": {"exclude": ["shop"]}}},
                                       lnu], "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}  # fmt: skip
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == "profiles.0.DefaultEvictor: evictableNamespaces"
    assert "no namespace evictable" in caught.value.message


def test_what_rebalancer_does_besides_the_descheduler_is_listed():
    conversion = imported("v1alpha2-low-node-utilization.yaml")
    notes = {n.path: n.message for n in conversion.notes if n.kind == "differs"}
    assert notes["profiles.0.LowNodeUtilization"].startswith("predictPlacement: false")
    assert "efficiency.bounceBackGuard" in notes
    assert "every 5m" in notes["schedule"]  # a DeschedulerPolicy says nothing of when it runs
    assert "copied" in notes_of(imported("chart-values.yaml"))["schedule"]  # the chart's schedule is, instead
    assert "0.95 quantile over the last 10m" in notes_of(imported("v1alpha2-metrics.yaml"))["classifyBy current"]


def notes_of(conversion: Conversion) -> dict[str, str]:
    return {n.path: n.message for n in conversion.notes if n.kind == "differs"}


def test_filter_and_sort_plugins_are_named_not_dropped():
    lnu = {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}}}
    plugins = {"balance": {"enabled": ["LowNodeUtilization"]}, "filter": {"enabled": ["MyEvictor"]}}
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [lnu], "plugins": plugins}]}  # fmt: skip
    assert "profiles.0.plugins.filter" in paths(convert(document), "unsupported")


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"apiVersion": "v1", "kind": "Pod"}, "kind"),
        ({"apiVersion": "descheduler/v9", "kind": "DeschedulerPolicy"}, "apiVersion"),
        ({"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": []}, ""),
        ({"deschedulerPolicy": {"other": 1}}, "deschedulerPolicy"),
        ({"kind": "ConfigMap", "data": {"policy.yaml": "a: [b"}}, "data.policy.yaml"),
        ({"kind": "ConfigMap", "data": {"other.yaml": ""}}, "data"),
    ],
)
def test_documents_that_are_no_descheduler_policy_are_refused_with_the_field(document: dict[str, Any], path: str):
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == path


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"thresholds": {"cpu": 120}, "targetThresholds": {"cpu": 150}}, "thresholds.cpu"),
        # bool("false") is True: read as text, deviation thresholds would turn a 20/50 band into mean-20/mean+50
        (
            {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}, "useDeviationThresholds": "false"},
            "useDeviationThresholds",
        ),
    ],
    ids=["threshold-out-of-range", "deviation-flag-no-boolean"],
)
def test_a_low_node_utilization_argument_it_cannot_read_names_its_field(args: dict[str, object], field: str) -> None:
    lnu = {"name": "LowNodeUtilization", "args": args}
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [lnu],
                              "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}  # fmt: skip
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == f"profiles.0.LowNodeUtilization.{field}"


def test_memory_and_pods_of_high_node_utilization_fill_destinations_to_allocatable():
    hnu = {"name": "HighNodeUtilization", "args": {"thresholds": {"cpu": 20, "memory": 20, "pods": 30},
                                                   "metricsUtilization": {"metricsServer": True}}}  # fmt: skip
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [hnu],
                              "plugins": {"balance": {"enabled": ["HighNodeUtilization"]}}}]}  # fmt: skip
    conversion = convert(document)
    (strategy,) = conversion.policy["strategies"]
    assert strategy["thresholds"] == {"cpu": 20, "memory": 20, "pods": 30}
    assert strategy["targetThresholds"] == {"cpu": 100, "memory": 100, "pods": 100}
    assert "profiles.0.HighNodeUtilization.thresholds" not in paths(conversion, "unsupported")
    note = next(n for n in conversion.notes if n.path == "profiles.0.HighNodeUtilization.thresholds.memory")
    assert "a node holding a pod of unknown memory is never emptied" in note.message
    assert parse_policy(policy_yaml(conversion, "hnu.yaml"), "hnu.yaml").reads_memory


def test_memory_stays_out_of_prometheus_metrics():
    by_query = {"name": "LowNodeUtilization", "args": {
        "thresholds": {"MetricResource": 20, "memory": 20}, "targetThresholds": {"MetricResource": 50, "memory": 50},
        "metricsUtilization": {"prometheus": {"query": "instance:node_cpu:rate:sum"}}}}  # fmt: skip
    for plugin in (by_query, {**by_query, "name": "HighNodeUtilization"}):
        document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                    "profiles": [{"name": "p", "pluginConfig": [plugin],
                                  "plugins": {"balance": {"enabled": [plugin["name"]]}}}]}  # fmt: skip
        conversion = convert(document)
        (strategy,) = conversion.policy["strategies"]
        assert "memory" not in strategy["thresholds"]
        note = next(n for n in conversion.notes if n.path == f"profiles.0.{plugin['name']}.thresholds")
        assert note.message.startswith("memory: ") and "MetricResource stands for one resource" in note.message


def test_memory_from_the_metrics_server_is_read_as_the_working_set():
    lnu = {"name": "LowNodeUtilization", "args": {
        "thresholds": {"cpu": 20, "memory": 30}, "targetThresholds": {"cpu": 50, "memory": 70},
        "metricsUtilization": {"metricsServer": True}}}  # fmt: skip
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [lnu],
                              "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}  # fmt: skip
    conversion = convert(document)
    (strategy,) = conversion.policy["strategies"]
    assert strategy["classifyBy"] == "current" and strategy["targetThresholds"] == {"cpu": 50, "memory": 70}
    assert "profiles.0.LowNodeUtilization.thresholds.memory" in paths(conversion, "differs")
    assert parse_policy(policy_yaml(conversion, "metrics.yaml"), "metrics.yaml").reads_memory


def test_memory_only_thresholds_import_nothing_and_say_why():
    lnu = {"name": "LowNodeUtilization", "args": {"thresholds": {"memory": 20}, "targetThresholds": {"memory": 50}}}
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [lnu],
                              "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}  # fmt: skip
    with pytest.raises(SourceProblem, match="no LowNodeUtilization or HighNodeUtilization"):
        convert(document)


def test_cli_writes_the_policy_and_lists_the_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "policy.yaml"
    assert main(["import-policy", str(DATA / "v1alpha2-low-node-utilization.yaml"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Not imported (no equivalent):" in err and "RemoveDuplicates" in err
    assert "classifyBy current" in err  # how to leave requests for real usage
    text = out.read_text()
    assert "# Not imported (no equivalent):" in text and "#   - profiles.0.RemoveDuplicates" in text
    assert load_policy(out).strategies[0].classify_by == "requests"
    assert main(["check-config", str(out)]) == 0


def test_cli_refuses_a_file_that_is_no_descheduler_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\n")
    assert main(["import-policy", str(bad)]) == 2
    assert "kind" in capsys.readouterr().err


STRUCTURE = {"apiVersion", "kind", "metadata", "data", "profiles", "strategies", "deschedulerPolicy",
             "deschedulerPolicyAPIVersion", "enabled", "params", "nodeResourceUtilizationThresholds",
             "DefaultEvictor"}  # fmt: skip
RENAMED = {"ignorePvcPods": "evictPodsWithPVC", "thresholdPriority": "priorityThreshold", "namespaces": "exclude"}
IMPORTED_PLUGINS = {"DefaultEvictor", "LowNodeUtilization", "HighNodeUtilization"}  # the others: one note each
ALWAYS_SO = {"evictSystemCriticalPods": False}  # rebalancer's fixed behaviour: nothing to import or to say


def fields(document: Any) -> set[str]:
    """The names a descheduler document sets: its top level, the chart's values, the arguments of the
    plugins rebalancer imports, and the names of the others."""
    if document.get("kind") == "ConfigMap":
        return fields(yaml.safe_load(document["data"]["policy.yaml"]))
    policy = document.get("deschedulerPolicy", document)
    names = set(document) | {k for k, v in policy.items() if ALWAYS_SO.get(k, object()) != v}
    for profile in policy.get("profiles", []):
        for config in profile.get("pluginConfig", []):
            names.add(config["name"])
            if config["name"] in IMPORTED_PLUGINS:
                names |= {k for k, v in (config.get("args") or {}).items() if ALWAYS_SO.get(k, object()) != v}
        for point in profile.get("plugins", {}).values():
            names |= set(point.get("enabled") or [])
    for name, strategy in (policy.get("strategies") or {}).items():
        names.add(name)
        if name in IMPORTED_PLUGINS:
            params = strategy.get("params") or {}
            names |= {*params, *(params.get("nodeResourceUtilizationThresholds") or {})}
    return names - STRUCTURE


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_every_field_is_imported_or_named_in_a_note(fixture: Path):
    document = yaml.safe_load(fixture.read_text())
    conversion = convert(document)
    said = yaml.safe_dump(conversion.policy) + "\n".join(str(n) for n in conversion.notes)
    missing = {name for name in fields(document) if name not in said and RENAMED.get(name, name) not in said}
    assert not missing, f"{fixture.name}: neither imported nor noted: {sorted(missing)}"


def test_cli_writes_nothing_when_the_result_would_not_pass_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # thresholds cpu 0: no node is ever cold, which rebalancer's validation refuses (the descheduler aborts)
    source = tmp_path / "zero.yaml"
    source.write_text(
        "apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n  pluginConfig:\n"
        "  - {name: LowNodeUtilization, args: {thresholds: {cpu: 0}, targetThresholds: {cpu: 50}}}\n"
        "  plugins: {balance: {enabled: [LowNodeUtilization]}}\n"
    )
    out = tmp_path / "policy.yaml"
    assert main(["import-policy", str(source), "--out", str(out)]) == 2
    assert "strategies.0.thresholds.cpu" in capsys.readouterr().err
    assert not out.exists()


V1ALPHA1_LNU = {"params": {"nodeResourceUtilizationThresholds": {"thresholds": {"cpu": 20},
                                                                 "targetThresholds": {"cpu": 50}}}}  # fmt: skip


def test_a_v1alpha1_strategy_runs_only_with_enabled_true_as_in_the_descheduler():
    # the descheduler runs a v1alpha1 strategy only when enabled is true; an absent enabled is false
    document = {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy",
                "strategies": {"LowNodeUtilization": V1ALPHA1_LNU,
                               "HighNodeUtilization": {"enabled": True, "params": {
                                   "nodeResourceUtilizationThresholds": {"thresholds": {"cpu": 10}}}}}}  # fmt: skip
    conversion = convert(document)
    assert [s["kind"] for s in conversion.policy["strategies"]] == ["HighNodeUtilization"]
    assert "strategies.LowNodeUtilization" in paths(conversion, "unsupported")
    with pytest.raises(SourceProblem, match="no LowNodeUtilization"):
        convert({**document, "strategies": {"LowNodeUtilization": V1ALPHA1_LNU}})


def test_a_v1alpha1_enabled_that_is_no_boolean_is_refused_with_the_field():
    document = {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy",
                "strategies": {"LowNodeUtilization": {**V1ALPHA1_LNU, "enabled": "false"}}}  # fmt: skip
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == "strategies.LowNodeUtilization.enabled"


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (
            {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "strategies": {"LowNodeUtilization": {
                "enabled": True, "params": {**V1ALPHA1_LNU["params"], "thresholdPriority": 1000,
                                            "thresholdPriorityClassName": "low"}}}},
            "strategies.LowNodeUtilization.params.thresholdPriority",
        ),
        (
            {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [{"name": "p",
                "pluginConfig": [{"name": "DefaultEvictor", "args": {"priorityThreshold": {"value": 1000,
                                                                                         "name": "low"}}},
                                 {"name": "LowNodeUtilization", "args": {"thresholds": {"cpu": 20},
                                                                         "targetThresholds": {"cpu": 50}}}],
                "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]},
            "profiles.0.DefaultEvictor.priorityThreshold",
        ),
    ],
)  # fmt: skip
def test_a_priority_threshold_by_value_and_by_name_is_refused_as_the_descheduler_does(
    document: dict[str, Any], path: str
):
    # the descheduler refuses the policy ("only one of priorityThreshold fields can be set"); keeping one
    # of the two would drop the other's protection
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == path


def test_a_plugin_entry_that_is_no_name_is_refused_with_the_field():
    # read past, the LowNodeUtilization written as a mapping would vanish without a note beside the other one
    hnu = {"name": "HighNodeUtilization", "args": {"thresholds": {"cpu": 10}}}
    document = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
                "profiles": [{"name": "p", "pluginConfig": [hnu],
                              "plugins": {"balance": {"enabled": ["HighNodeUtilization",
                                                                  {"name": "LowNodeUtilization"}]}}}]}  # fmt: skip
    with pytest.raises(SourceProblem) as caught:
        convert(document)
    assert caught.value.path == "profiles.0.plugins.balance.enabled.1"
