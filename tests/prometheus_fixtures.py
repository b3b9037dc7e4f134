"""Real-Prometheus fixtures, shared by adapter and service tests (loaded by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.prom_fixture import CannedHttpServer, PrometheusServer, Series, StartPrometheus, require_binary


@pytest.fixture(scope="session")
def prometheus_binaries() -> tuple[str, str]:
    """Fails (never skips) when the Debian package prometheus is missing."""
    return require_binary("prometheus"), require_binary("promtool")


@pytest.fixture(scope="module")
def start_prometheus(
    tmp_path_factory: pytest.TempPathFactory, prometheus_binaries: tuple[str, str]
) -> Iterator[StartPrometheus]:
    """Starts real Prometheus servers (history backfilled first); all are stopped after the module.

    ``start_prometheus(history, rules={...}, extra_args=[...])`` returns a ready server.
    """
    servers: list[PrometheusServer] = []

    def start(history: Iterable[Series] = (), **options: Any) -> PrometheusServer:
        workdir: Path = tmp_path_factory.mktemp("prometheus")
        server = PrometheusServer(workdir, history, **options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def canned_http() -> Iterator[CannedHttpServer]:
    """A local HTTP server with canned answers (503s, silence, non-Prometheus bodies)."""
    with CannedHttpServer() as server:
        yield server
