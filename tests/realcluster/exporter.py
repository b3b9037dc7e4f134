"""A live cAdvisor-shaped exporter on 127.0.0.1 for a real Prometheus to scrape: counters that grow at each
pod's load, the pod-level cgroup repeating the sum (counted, usage would double), and each node's root cgroup
(``id="/"``: its system daemons plus its pods)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START = 1000.0  # core-seconds before the exporter started (containers ran earlier)


def exposition(pods: Mapping[tuple[str, str], tuple[str, float]], nodes: Mapping[str, float], elapsed: float) -> bytes:
    """``pods``: (namespace, pod) -> (node, cores); ``nodes``: node -> its system daemons' cores."""
    lines = ["# TYPE container_cpu_usage_seconds_total counter"]
    for node, system in nodes.items():
        cores = system + sum(c for n, c in pods.values() if n == node)
        lines.append(f'container_cpu_usage_seconds_total{{id="/",node="{node}"}} {START + cores * elapsed:.6f}')
    for (namespace, pod), (node, cores) in pods.items():
        base = f'namespace="{namespace}",pod="{pod}",node="{node}"'
        value = START + cores * elapsed
        lines.append(
            f'container_cpu_usage_seconds_total{{{base},container="app",id="/kubepods/{pod}/app"}} {value:.6f}'
        )
        lines.append(f'container_cpu_usage_seconds_total{{{base},container="",id="/kubepods/{pod}"}} {value:.6f}')
    return ("\n".join(lines) + "\n").encode()


@contextmanager
def serving(pods: Mapping[tuple[str, str], tuple[str, float]], nodes: Mapping[str, float]) -> Iterator[int]:
    """The exporter's port, while the block runs."""
    started = time.time()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(pods, nodes, time.time() - started)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
