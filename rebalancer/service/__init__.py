"""`rebalancer serve`: the HTTP side (Alertmanager webhook, /metrics, probes) and its parts."""

from rebalancer.service.http import (
    MAX_BODY_BYTES,
    WEBHOOK_PATH,
    HttpServer,
    RebalancerApp,
    TokenFile,
    TokenUnavailable,
    make_app,
    serve_http,
)
from rebalancer.service.webhook import (
    DEFAULT_NODE_LABELS,
    QUEUED,
    Ack,
    Alert,
    AlertSink,
    AlertStatus,
    NodeAlert,
    WebhookPayload,
    node_alerts,
    strip_port,
)

__all__ = [
    "DEFAULT_NODE_LABELS",
    "MAX_BODY_BYTES",
    "QUEUED",
    "WEBHOOK_PATH",
    "Ack",
    "Alert",
    "AlertSink",
    "AlertStatus",
    "HttpServer",
    "NodeAlert",
    "RebalancerApp",
    "TokenFile",
    "TokenUnavailable",
    "WebhookPayload",
    "make_app",
    "node_alerts",
    "serve_http",
    "strip_port",
]
