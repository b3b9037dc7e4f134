"""`rebalancer serve`: the HTTP side (the Alertmanager webhook; /metrics and the probes on their own port)."""

from rebalancer.service.http import StatusApp, TokenFile, TokenUnavailable, make_status_app
from rebalancer.service.refusal_log import RefusalLog
from rebalancer.service.server import (
    STATUS_LIMITS,
    HttpServer,
    ServerLimits,
    connections_allowed,
    raise_open_files_limit,
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
from rebalancer.service.webhook_app import (
    MAX_BODY_BYTES,
    MAX_CONCURRENT_REQUESTS,
    WEBHOOK_PATH,
    WORKER_THREAD_NAME,
    RebalancerApp,
    make_app,
)

__all__ = [
    "DEFAULT_NODE_LABELS",
    "MAX_BODY_BYTES",
    "MAX_CONCURRENT_REQUESTS",
    "QUEUED",
    "STATUS_LIMITS",
    "WEBHOOK_PATH",
    "WORKER_THREAD_NAME",
    "Ack",
    "Alert",
    "AlertSink",
    "AlertStatus",
    "HttpServer",
    "NodeAlert",
    "RebalancerApp",
    "RefusalLog",
    "ServerLimits",
    "StatusApp",
    "TokenFile",
    "TokenUnavailable",
    "WebhookPayload",
    "connections_allowed",
    "make_app",
    "make_status_app",
    "node_alerts",
    "raise_open_files_limit",
    "serve_http",
    "strip_port",
]
