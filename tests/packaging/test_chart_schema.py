"""values.schema.json: wrong values fail at install time, naming the value; valid policies pass.

The policy part of the schema is generated from rebalancer's own policy model (scripts/chart_schema.py),
so the chart and `rebalancer check-config` agree on what a policy is; a test fails when they drift.
Values that are only wrong together (replicas without leader election, ...) fail in the templates with
a sentence naming the value.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from scripts.chart_schema import SCHEMA_FILE, with_policy

from rebalancer.domain.errors import ConfigError
from rebalancer.policy import parse_policy
from tests.packaging.chart import NAMESPACE, ROOT, Doc, render, validate_schema

POLICY_EXAMPLES = sorted((ROOT / "config").glob("*.yaml"))


def test_the_policy_schema_is_the_policy_models() -> None:
    current = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert with_policy(current) == current, "values.schema.json is out of date: run python -m scripts.chart_schema"


# (id, values, the path and words Helm's error must name)
REJECTED: list[tuple[str, Doc, list[str]]] = [
    ("unknown kind", {"kind": "StatefulSet"}, ["/kind"]),
    ("a bare off is false in YAML", helm.values_from_yaml("dryRun: off\n"), ["/dryRun"]),
    ("dry run mode", {"dryRun": "maybe"}, ["/dryRun"]),
    ("replicas as text", {"replicas": "2"}, ["/replicas", "string"]),
    ("negative replicas", {"replicas": -1}, ["/replicas"]),
    ("misspelt top-level value", {"replica": 2}, ["replica"]),
    ("image digest", {"image": {"digest": "latest"}}, ["/image/digest"]),
    ("tag in the image repository", {"image": {"repository": "registry.example.com/rebalancer:1.0"}},
     ["/image/repository"]),
    ("digest in the image repository", {"image": {"repository": "registry.example.com/rebalancer@sha256:" + "0" * 64}},
     ["/image/repository"]),
    ("schedule", {"kind": "CronJob", "schedule": "every 5 minutes"}, ["/schedule"]),
    ("webhook port", {"service": {"webhookPort": 70000}}, ["/service/webhookPort"]),
    ("rule file", {"prometheusRule": {"rules": "kube-state-metrics"}}, ["/prometheusRule/rules"]),
    ("writable root", {"securityContext": {"readOnlyRootFilesystem": False}}, ["/securityContext/readOnlyRootFilesystem"]),
    ("root user", {"podSecurityContext": {"runAsNonRoot": False}}, ["/podSecurityContext/runAsNonRoot"]),
    ("capability added", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
     ["/securityContext/capabilities/add"]),
    ("ALL not dropped", {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
     ["/securityContext/capabilities/drop"]),
    ("no seccomp", {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
     ["/securityContext/seccompProfile/type"]),
    ("no pod seccomp", {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
     ["/podSecurityContext/seccompProfile/type"]),
    ("policy threshold", {"policy": {"strategies": [{"kind": "LowNodeUtilization", "thresholds": {"cpu": 150},
                                                    "targetThresholds": {"cpu": 70}}]}}, ["/policy/strategies/0"]),
    ("unknown strategy", {"policy": {"strategies": [{"kind": "Descheduler"}]}}, ["/policy/strategies/0"]),
    ("no strategy", {"policy": {"strategies": []}}, ["/policy/strategies"]),
    ("misspelt policy field", {"policy": {"prometheus": {"uri": "http://p:9090"}}}, ["/policy/prometheus", "uri"]),
    ("policy duration", {"policy": {"prometheus": {"window": "ten minutes"}}}, ["/policy/prometheus/window"]),
    ("policy port", {"policy": {"service": {"port": 0}}}, ["/policy/service/port"]),
    ("former key as text", {"policy": {"prometheus": {"timeoutSeconds": "30s"}}}, ["/policy/prometheus/timeoutSeconds"]),
]  # fmt: skip


@pytest.mark.parametrize(("values", "named"), [(v, n) for _, v, n in REJECTED], ids=[i for i, _, _ in REJECTED])
def test_wrong_values_fail_at_install_naming_the_value(values: Doc, named: list[str]) -> None:
    with pytest.raises(helm.HelmValuesError) as failure:
        render(values)  # what `helm install` does: the schema is checked before anything renders
    for word in named:
        assert word in str(failure.value)


@pytest.mark.parametrize("repository", ["rebalancer", "localhost:5000/rebalancer", "registry.example.com:443/a/b/c"])
def test_an_image_repository_with_a_registry_port_passes(repository: str) -> None:
    validate_schema({"image": {"repository": repository}})


# (id, values, words of the template's own message)
REFUSED: list[tuple[str, Doc, list[str]]] = [
    ("replicas without leader election", {"replicas": 2, "policy": {"service": {"leaderElection": {"enabled": False}}}},
     ["replicas: 2 needs leader election", "policy.service.leaderElection.enabled"]),
    ("replicas of a CronJob", {"kind": "CronJob", "replicas": 2}, ["replicas", "kind: Deployment"]),
    ("ServiceMonitor of a CronJob", {"kind": "CronJob", "serviceMonitor": {"enabled": True}}, ["serviceMonitor.enabled"]),
    ("state in another namespace", {"policy": {"state": {"namespace": "elsewhere"}}},
     ["policy.state.namespace", '"elsewhere"', f'"{NAMESPACE}"']),
    ("token file beside the chart's", {"policy": {"service": {"webhook": {"tokenFile": "/secrets/t"}}}},
     ["policy.service.webhook.tokenFile", "/etc/rebalancer/webhook/token"]),
    ("loopback listener", {"policy": {"service": {"host": "127.0.0.1"}}}, ["policy.service.host", "127.0.0.1"]),
    ("loopback metrics listener", {"policy": {"service": {"metricsHost": "localhost"}}},
     ["policy.service.metricsHost", "localhost", "probes"]),
    ("one Service port for both", {"service": {"webhookPort": 9102}}, ["service.webhookPort", "service.metricsPort"]),
    ("webhook without a token", {"webhook": {"token": {"enabled": False}}},
     ["webhook.token.enabled: false", "policy.service.webhook.allowUnauthenticated: true"]),
]  # fmt: skip


@pytest.mark.parametrize(("values", "words"), [(v, w) for _, v, w in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_values_wrong_together_fail_with_a_sentence(values: Doc, words: list[str]) -> None:
    validate_schema(values)  # each value is fine on its own
    with pytest.raises(helm.HelmError) as failure:
        render(values)
    for word in words:
        assert word in str(failure.value)


@pytest.mark.parametrize("example", POLICY_EXAMPLES, ids=[p.name for p in POLICY_EXAMPLES])
def test_every_example_policy_installs_as_values(example: Path) -> None:
    """The schema rejects nothing check-config accepts: each config/*.yaml installs as `policy:`, and every
    setting of the file reaches the policy the pod reads (Helm only adds the chart's default maps and
    protected namespaces)."""
    policy: Doc = yaml.safe_load(example.read_text(encoding="utf-8"))
    rendered = render({"policy": policy, "kind": "CronJob"})
    parse_policy(rendered.policy_text, example.name)
    assert_within(policy, yaml.safe_load(rendered.policy_text), "policy")


def assert_within(given: Any, rendered: Any, path: str) -> None:
    if isinstance(given, dict):
        assert isinstance(rendered, dict), path
        for key, value in given.items():
            assert key in rendered, f"{path}.{key} lost"
            assert_within(value, rendered[key], f"{path}.{key}")
    elif path.endswith("evictableNamespaces.exclude"):  # the chart adds the namespaces it protects
        assert rendered[: len(given)] == given, path
        assert set(rendered[len(given) :]) <= {"monitoring", NAMESPACE}, path
    else:
        assert rendered == given, path


def test_a_policy_with_former_seconds_keys_still_installs() -> None:
    """Values written for an older chart (durations as numbers of seconds) pass the schema; the pod reads them
    as the durations that replaced them."""
    former = {"timeoutSeconds": 30, "maxDataAgeSeconds": 600}
    lease = {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20, "retryPeriodSeconds": 4}
    rendered = render({"policy": {"prometheus": former, "service": {"leaderElection": lease}}})
    policy = parse_policy(rendered.policy_text, "rendered.yaml")
    assert (policy.prometheus.timeout, policy.prometheus.max_data_age) == (timedelta(seconds=30), timedelta(minutes=10))
    timings = policy.service.leader_election
    assert (timings.lease_duration, timings.renew_deadline, timings.retry_period) == (
        timedelta(seconds=30),
        timedelta(seconds=20),
        timedelta(seconds=4),
    )


@pytest.mark.parametrize(
    "lease",
    [{"leaseDuration": "10s", "renewDeadline": "10s"}, {"retryPeriodSeconds": 12}],
    ids=["durations", "former seconds"],
)
def test_leader_election_timings_out_of_order_install_but_the_pod_refuses_them(lease: Doc) -> None:
    """The order retryPeriod < renewDeadline < leaseDuration ties three fields: no JSON schema says it, the
    pod's start does, naming the field."""
    rendered = render({"policy": {"service": {"leaderElection": lease}}})
    with pytest.raises(ConfigError) as refused:
        parse_policy(rendered.policy_text, "rendered.yaml")
    [(field, message)] = refused.value.problems
    assert field == "service.leaderElection.renewDeadline"
    assert "need retryPeriod < renewDeadline < leaseDuration" in message
