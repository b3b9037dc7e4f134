"""serve's two listeners start in order: the webhook's first, then the status listener (/metrics and the
probes). Once a probe answers (the kubelet counts the pod ready and its Service sends it alerts), the webhook
takes connections; a status port that cannot be bound leaves neither listening."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from rebalancer.app import serve
from rebalancer.domain.errors import ConfigError
from rebalancer.policy import Policy, parse_policy
from rebalancer.service.http import make_status_app
from rebalancer.service.metrics import Metrics
from rebalancer.service.server import App
from tests.ports import free_port

STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"


def policy(port: int, metrics_port: int) -> Policy:
    return parse_policy(STRATEGY + f"service: {{host: 127.0.0.1, port: {port}, metricsPort: {metrics_port}}}\n")


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def webhook_app() -> App:
    return make_status_app(metrics=Metrics(), ready=lambda: True)  # any app: only the listening counts


def test_the_webhook_listens_before_any_probe_can_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    port, metrics_port = free_port(), free_port()
    seen: list[bool] = []

    def status_app(**kwargs: Any) -> App:  # the status listener is made: the webhook must already listen
        seen.append(accepts(port))
        return make_status_app(**kwargs)

    monkeypatch.setattr(serve, "make_status_app", status_app)
    stop = serve._serve_http(policy(port, metrics_port), "policy.yaml", webhook_app(), lambda: True, Metrics())
    try:
        assert seen == [True]
        assert accepts(metrics_port)
    finally:
        stop()
    assert not accepts(port) and not accepts(metrics_port)


def test_a_status_port_taken_leaves_the_webhook_port_free_and_names_the_field() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        metrics_port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"service\.metricsPort"):
            serve._serve_http(policy(port, metrics_port), "policy.yaml", webhook_app(), lambda: True, Metrics())
    assert not accepts(port)
    with socket.create_server(("127.0.0.1", port)):  # free again: the webhook's listener was stopped
        pass
