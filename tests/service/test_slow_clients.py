"""A crowd of slow clients on both listeners of the production server (in a process of its own, as
`bench.slow_clients` runs it): 200 connections on each, every one trickling a request head at one byte a
second without a token. Every probe is still answered 200 within a second, and legitimate alerts are
accepted."""

from __future__ import annotations

import http.client
import time

from prometheus_client.parser import text_string_to_metric_families

from bench.slow_clients import SlowCrowd, measure, served

PER_PORT = 200


def open_connections(port: int) -> dict[str, float]:
    """The server's own count of open connections per listener, from its /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {
        s.labels["listener"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "rebalancer_http_connections"
    }


def test_200_slow_clients_on_each_listener_fail_no_probe_and_no_alert() -> None:
    with served(header_timeout=10.0) as server:  # the status listener lets a head trickle 5 s at most
        with SlowCrowd(server.ports, PER_PORT, ramp_s=1.0, max_s=60.0) as crowd:
            gathering = time.monotonic() + 30
            while min(crowd.held().values()) < PER_PORT:  # probes and alerts while it gathers are not counted
                assert time.monotonic() < gathering, f"the crowd never gathered: {crowd.held()}"
                measure(server, 0.2)
            phase = measure(server, 6.0, crowd)
            seen = open_connections(server.ports["status"])
        assert crowd.failed_connects == 0
    # 200 clients all along; one the server let go at its header timeout is reopened at once, so a sample
    # can catch a few between the two connections
    for listener in ("webhook", "status"):
        assert phase.held_min(listener) >= 0.95 * PER_PORT and phase.held_mean(listener) >= 0.98 * PER_PORT
        assert seen[listener] >= 0.95 * PER_PORT  # the server's own count
    assert len(phase.probes) >= 60
    assert {code for code, _ in phase.probes} == {200}
    assert max(seconds for _, seconds in phase.probes) < 1.0
    assert len(phase.alerts) >= 30
    assert phase.alerts.count(202) >= 0.99 * len(phase.alerts), phase.alerts
