"""serve's own checks of a policy, one function for start, hot reload and `check-config --for serve`: a
reload that start would refuse is refused (and counted), a change to a setting read only at start is taken
as far as it goes and said to need a restart, and a token file that cannot authenticate anything is said at
once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rebalancer.app.cli import main
from rebalancer.policy import Policy, parse_policy
from rebalancer.policy.serve_checks import ServeCheck, check_for_serve, restart_required
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Service, Trigger

STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
UNAUTHENTICATED = STRATEGY + "service: {webhook: {allowUnauthenticated: true}}\n"


def with_token(path: Path, service: str = "") -> str:
    return STRATEGY + f"service: {{webhook: {{tokenFile: '{path}'}}{service}}}\n"


def test_no_webhook_token_is_refused_unless_allowed() -> None:
    check = check_for_serve(parse_policy(STRATEGY))
    assert [field for field, _ in check.problems] == ["service.webhook.tokenFile"]
    check = check_for_serve(parse_policy(UNAUTHENTICATED))
    assert check.problems == ()
    assert check.warnings == (
        (
            "service.webhook.allowUnauthenticated",
            "the webhook accepts requests WITHOUT a token: anyone who can reach 0.0.0.0:8080 can trigger "
            "rebalancing cycles",
        ),
    )


def test_token_files_that_authenticate_nothing_are_warned_about(tmp_path: Path) -> None:
    token, bearer = tmp_path / "webhook-token", tmp_path / "prometheus-token"
    policy = parse_policy(f"prometheus: {{bearerTokenFile: '{bearer}'}}\n" + with_token(token))
    assert check_for_serve(policy).warnings == (
        (
            "service.webhook.tokenFile",
            f"cannot read the webhook token file {token}: No such file or directory: every webhook request is "
            "refused until it holds the token",
        ),
        (
            "prometheus.bearerTokenFile",
            f"cannot read the Prometheus bearer token file {bearer}: No such file or directory: every cycle fails "
            "to read usage until it holds the token",
        ),
    )
    token.write_text(" \n")
    bearer.write_text("b3arer")
    [(field, message)] = check_for_serve(policy).warnings
    assert (field, message) == (
        "service.webhook.tokenFile",
        f"the webhook token file {token} is empty: every webhook request is refused until it holds the token",
    )
    token.write_text("t0ken\n")
    assert check_for_serve(policy) == ServeCheck((), ())


def test_restart_required_names_what_serve_reads_only_at_start() -> None:
    started = parse_policy(UNAUTHENTICATED)
    assert restart_required(started, parse_policy(UNAUTHENTICATED.replace("cpu: 20", "cpu: 25"))) == []
    now = parse_policy(
        STRATEGY + "service: {port: 8081, webhook: {allowUnauthenticated: true, nodeLabels: [node]}, "
        "leaderElection: {leaseDuration: 20s}}\nstate: {namespace: other}\n"
    )
    assert restart_required(started, now) == [
        "service.port (8080 -> 8081)",
        "service.webhook.nodeLabels ([node, instance] -> [node])",
        "service.leaderElection.leaseDuration (15s -> 20s)",
        "state.namespace (the Lease's) (unset -> other)",
    ]


def never(policy: Policy, trigger: Trigger) -> CycleResult:
    raise AssertionError("no cycle runs in this test")


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    body, _ = metrics.exposition()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not exposed")


def test_a_reload_serve_would_not_start_with_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(UNAUTHENTICATED)
    metrics = Metrics()
    service = Service(path, never, metrics, lambda: True, policy=parse_policy(UNAUTHENTICATED))
    path.write_text(STRATEGY.replace("cpu: 20", "cpu: 25"))  # valid, but without a webhook token
    with caplog.at_level(logging.INFO, logger="rebalancer"):
        assert service.reload() is False
    assert service.policy.strategies[0].thresholds.cpu == 20  # the last good policy stays
    assert metric(metrics, "rebalancer_policy_reload_total", result="refused") == 1
    assert metric(metrics, "rebalancer_policy_reload_total", result="applied") == 0
    assert metric(metrics, "rebalancer_policy_valid") == 0
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith(
        f"policy reload refused, keeping the last good policy: serve would not start with it:\n"
        f"{path}: service.webhook.tokenFile: not set"
    )


def test_a_change_that_needs_a_restart_is_taken_said_and_exported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(UNAUTHENTICATED)
    metrics = Metrics()
    service = Service(path, never, metrics, lambda: True, policy=parse_policy(UNAUTHENTICATED))
    path.write_text(UNAUTHENTICATED.replace("cpu: 20", "cpu: 25").replace("{webhook", "{port: 8081, webhook"))
    with caplog.at_level(logging.WARNING, logger="rebalancer.service"):
        assert service.reload() is True
    assert service.policy.strategies[0].thresholds.cpu == 25  # the rest is taken
    assert metric(metrics, "rebalancer_policy_restart_required") == 1
    assert metric(metrics, "rebalancer_policy_reload_total", result="applied") == 1
    assert (
        "policy reloaded, but these settings are read only at start and need a restart: service.port (8080 -> 8081)"
    ) in caplog.messages
    path.write_text(UNAUTHENTICATED.replace("cpu: 20", "cpu: 30"))  # the port as at start again
    assert service.reload() is True
    assert metric(metrics, "rebalancer_policy_restart_required") == 0


def test_check_config_for_serve_runs_serve_s_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(STRATEGY)
    assert main(["check-config", str(path)]) == 0  # any command may read it: run --once needs no webhook
    capsys.readouterr()
    assert main(["check-config", "--for", "serve", str(path)]) == 2
    assert f"{path}: service.webhook.tokenFile: not set: the webhook would take alerts" in capsys.readouterr().err
    token = tmp_path / "token"
    path.write_text(with_token(token))
    assert main(["check-config", "--for", "serve", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  warning: service.webhook.tokenFile: cannot read the webhook token file {token}" in out
