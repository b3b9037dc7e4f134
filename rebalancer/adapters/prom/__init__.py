"""Prometheus adapter: the only package that imports ``prometheus_api_client`` or ``requests``."""

from rebalancer.adapters.prom.source import PrometheusUsageSource

__all__ = ["PrometheusUsageSource"]
