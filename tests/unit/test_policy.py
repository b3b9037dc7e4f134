"""Policy loading: every example loads, every problem names its field, check-config exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.app.cli import main
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.efficiency import EfficiencySettings
from rebalancer.offline.demo import demo_policy_path
from rebalancer.policy import parse_policy, parse_policy_warning

CONFIG = Path(__file__).resolve().parents[2] / "config"


@pytest.mark.parametrize("path", sorted(CONFIG.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_load(path: Path) -> None:
    policy = parse_policy(path.read_text(), str(path))
    assert policy.strategies


def test_the_efficiency_example_holds_the_defaults_it_says_it_shows() -> None:
    """config/efficiency.yaml shows "every field with its default": what it sets must be the default, or a
    copy of it (a stale reference query, say) would replace the default for whoever starts from the file."""
    policy = parse_policy((CONFIG / "efficiency.yaml").read_text())
    assert policy.efficiency == EfficiencySettings()


def test_demo_policy_loads() -> None:
    assert parse_policy(demo_policy_path().read_text()).strategies[0].kind == "LowNodeUtilization"


_LNU = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
BAD = [
    (
        "strategies:\n- kind: LowNodeUtilization\n  thresholds: {cpu: 80}\n  targetThresholds: {cpu: 70}\n",
        "strategies.0.thresholds.cpu",
        "must not be above targetThresholds.cpu",
    ),
    (
        "strategies:\n- kind: LowNodeUtilization\n  thresholds: {cpu: 10}\n  targetThresholds: {cpu: 70}\n"
        "  pools: {gpu: {thresholds: {cpu: 50}, targetThresholds: {cpu: 40}}}\n",
        "strategies.0.pools.gpu.thresholds.cpu",
        "must not be above",
    ),
    (
        "strategies:\n- kind: LowNodeUtilization\n  thresholds: {cpu: 120}\n  targetThresholds: {cpu: 70}\n",
        "strategies.0.thresholds.cpu",
        "less than or equal to 100",
    ),
    (
        "strategies:\n- kind: LowNodeUtilization\n  thresholds: {cpu: 1}\n  targetThresholds: {cpu: 70}\n  typo: 1\n",
        "strategies.0.typo",
        "Extra inputs are not permitted",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 10}, targetThresholds: {cpu: 70}, maxLandingRisk: 1}\n",
        "strategies.0.maxLandingRisk",
        "less than 1",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 10}, targetThresholds: {cpu: 70},"
        " percentageOfNodesToScore: 101}\n",
        "strategies.0.percentageOfNodesToScore",
        "less than or equal to 100",
    ),
    ("strategies:\n- kind: Nope\n", "strategies.0", "does not match any of the expected tags"),
    ("strategies: []\n", "strategies", "at least 1 item"),
    (
        "prometheus: {window: 10 minutes}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometheus.window",
        "'10 minutes' is not a duration such as 30s, 5m, 1h30m, 1d",
    ),
    (
        "prometheus: {queries: {podCpu: 'sum({oops})'}}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometheus",
        "queries.podCpu: cannot fill the template",
    ),
    (
        "protections: {evictableNamespaces: {include: [a], exclude: [b]}}\n"
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "protections.evictableNamespaces",
        "not both",
    ),
    (
        "pools: {definitions: [{name: a, nodeSelector: {}}, {name: a, nodeSelector: {}}]}\n"
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "pools",
        "repeated: a",
    ),
    (
        "protections:\n  labelSelector: {matchExpressions: [{key: a, operator: In}]}\n"
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "protections.labelSelector.matchExpressions.0",
        "needs at least one value",
    ),
    (
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}, useDeviationThresholds: true}\n",
        "strategies.0.useDeviationThresholds",
        "not supported",
    ),
    (
        "state: {configMap: s, backoffConfigMap: s}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "state.backoffConfigMap",
        "must differ",
    ),
    (
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}, schedule: {cron: '61 * * * *'}}\n",
        "strategies.0.schedule.cron",
        "minute: Error validating expression '61'",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 0}, targetThresholds: {cpu: 0}}\n",
        "strategies.0.thresholds.cpu",
        "0 makes no node cold",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 100}}\n",
        "strategies.0.targetThresholds.cpu",
        "100 makes no node hot",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 10}, targetThresholds: {cpu: 60},"
        " pools: {gpu: {thresholds: {cpu: 0}, targetThresholds: {cpu: 60}}}}\n",
        "strategies.0.pools.gpu.thresholds.cpu",
        "0 makes no node cold",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, useDeviationThresholds: true, thresholds: {cpu: 10},"
        " targetThresholds: {cpu: 100}}\n",
        "strategies.0.targetThresholds.cpu",
        "100 makes no node hot",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 0}, targetThresholds: {cpu: 100}}\n",
        "strategies.0.thresholds.cpu",
        "to turn the strategy off set enabled: false",
    ),
    (
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 0}}\n",
        "strategies.0.thresholds.cpu",
        "no pool's thresholds select any node",
    ),
    (
        "prometheus: {url: not a url}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometheus.url",
        "'not a url' is not an http(s) URL",
    ),
    (
        "prometheus: {url: 'ftp://prometheus:9090'}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometheus.url",
        "is not an http(s) URL",
    ),
    (
        "prometheus: {url: 'http://prometheus:99999'}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometheus.url",
        "is not an http(s) URL",
    ),
    (
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 10}, targetTreshold: {cpu: 70}}\n",
        "strategies.0.targetTreshold",
        "(did you mean 'targetThresholds'?)",
    ),
    (
        "prometeus: {}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "prometeus",
        "(did you mean 'prometheus'?)",
    ),
    (
        "protections: {evictPodsWithPvc: false}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "protections.evictPodsWithPvc",
        "(did you mean 'evictPodsWithPVC'?)",
    ),
    (
        "limits: {global: {maxPerCycel: 3}}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "limits.global.maxPerCycel",
        "(did you mean 'maxPerCycle'?)",
    ),
    ("{[1]: 2}\n", "", "a key must be a plain value"),
    ("7\n", "", "must be a YAML mapping, not a single value"),
    ("", "", "must be a YAML mapping, not an empty document"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "", "not valid YAML"),
    (
        "service: {timeZone: Mars/Olympus}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.timeZone",
        "unknown time zone",
    ),
    (
        "service: {maxConcurrentRequests: 0}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.maxConcurrentRequests",
        "greater than or equal to 1",
    ),
    (
        "service: {headerTimeout: 1h}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.headerTimeout",
        "1h is longer than 5m",
    ),
    (
        "service: {bodyTimeout: 6m}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.bodyTimeout",
        "6m is longer than 5m",
    ),
    (
        "service: {maxConnections: 8}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.maxConnections",
        "greater than or equal to 16",
    ),
    (
        "service: {watchCache: {relistInterval: 10s}}\nstrategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n",
        "service.watchCache.relistInterval",
        "10s is shorter than 1m",
    ),
    ("a: 1\na: 2\n", "", "duplicate key 'a'"),
    ("- just a list\n", "", "must be a YAML mapping"),
    (
        "service: {leaderElection: {leaseName: Rebalancer}}\n" + _LNU,
        "service.leaderElection.leaseName",
        "should match pattern",
    ),
    (
        "service: {leaderElection: {leaseName: " + "a" * 246 + "}}\n" + _LNU,
        "service.leaderElection.leaseName",
        "at most 245 characters",  # room for a dry run's -dry-run within a name's 253
    ),
]


@pytest.mark.parametrize(("text", "path", "message"), BAD)
def test_problems_name_the_field(text: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text, "p.yaml")
    assert any(p == path and message in m for p, m in info.value.problems), info.value.problems


def test_check_config_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text((CONFIG / "low-node-utilization.yaml").read_text())
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD[0][0])
    assert main(["check-config", str(good)]) == 0
    assert main(["check-config", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: strategies.0.thresholds.cpu: 80 must not be above targetThresholds.cpu (70)" in err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_node_caps_below_a_nodes_pod_count_are_named_for_high_node_utilization() -> None:
    hnu = "{kind: HighNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}"
    caps = "limits: {node: {maxPerCycle: 3, maxPerPeriod: [{count: 2, period: 1h}]}}"
    _, warnings = parse_policy_warning(f"{caps}\nstrategies:\n- {hnu}\n")
    assert [w.split(":")[0] for w in warnings] == ["limits.node.maxPerCycle", "limits.node.maxPerPeriod[0]"]
    assert "allows 3 a node per cycle: a node with more than 3 movable pods is never emptied" in warnings[0]
    assert "allows 2 a node per 1h: a node with more than 2 movable pods is never emptied" in warnings[1]
    disabled = hnu.replace("{kind: HighNodeUtilization,", "{kind: HighNodeUtilization, enabled: false,")
    assert parse_policy_warning(f"{caps}\nstrategies:\n- {disabled}\n")[1] == []


def test_a_pools_caps_and_a_workloads_max_unavailable_are_named_for_high_node_utilization() -> None:
    """A pool's cap holds back only that pool's nodes; maxUnavailable counts a workload's ready pods, as a
    number or a percentage of its replicas."""
    hnu = "{kind: HighNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}"
    caps = "limits: {global: {pools: {gpu: {rate: {perMinute: 1, burst: 2}}}}, workload: {maxUnavailable: 1}}"
    _, warnings = parse_policy_warning(f"{caps}\nstrategies:\n- {hnu}\n")
    assert [w.split(":")[0] for w in warnings] == [
        "limits.global.pools.gpu.rate.burst",
        "limits.workload.maxUnavailable",
    ]
    assert "allows bursts of 2 from pool gpu: a node of pool gpu with more than 2 movable pods is never" in warnings[0]
    assert (
        "allows 1 of a workload's replicas unavailable: a node with more than 1 ready pod of one workload"
        in warnings[1]
    )
    percent = caps.replace("maxUnavailable: 1", "maxUnavailable: 25%")
    [_, warning] = parse_policy_warning(f"{percent}\nstrategies:\n- {hnu}\n")[1]
    assert (
        "allows 25% of a workload's replicas unavailable (rounded down): a node with more of one workload's" in warning
    )


def test_merge_keys_read_as_yaml_defines_them_and_a_key_written_twice_is_still_refused() -> None:
    text = (
        "strategies:\n- kind: LowNodeUtilization\n  thresholds: &low {cpu: 20, memory: 20}\n"
        "  targetThresholds: {<<: *low, cpu: 70}\n"
    )
    (strategy,) = parse_policy(text).strategies
    target = strategy.target_thresholds
    assert (target.cpu, target.memory) == (70, 20)  # its own key wins over the merged one
    with pytest.raises(ConfigError, match="duplicate key 'cpu'"):
        parse_policy(text.replace("cpu: 70}", "cpu: 70, cpu: 80}"))
