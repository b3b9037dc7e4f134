"""CPU usage that follows each pod to its node, served as cAdvisor series for a real Prometheus to scrape.

Hollow nodes report no usage, so the test's own exporter makes it: every second it lists the namespace's pods
from the real API server and advances cAdvisor-shaped ``container_cpu_usage_seconds_total`` counters for
what runs where. A pod's load is a property of its workload: the pod label :data:`LOAD_LABEL` (millicores,
set in the Deployment's template), so a replacement carries its predecessor's load to whatever node the real
kube-scheduler chose. Per pod: its container ``app``, the pause container and the pod cgroup; per node, the
root cgroup (``id="/"``): system daemons plus every running pod with its pause container.

The history before the start is written by :meth:`LiveUsage.history` (the same series, constant at the
initial placement, ending where the live counters begin) for promtool to backfill, so the policy's usage
window is full from the first cycle. :meth:`LiveUsage.lives` is the truth the test judges against.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rebalancer.domain.quantity import cpu_millis
from tests.adapters.cadvisor import COUNTER_START, METRIC, PodCgroups, constant, counter, node_labels
from tests.adapters.prom_fixture import Series, _escape
from tests.controlplane import Admin

LOAD_LABEL = "rebalancer.test/cpu-millicores"
SYSTEM_CORES = 0.05  # each node's system daemons
PAUSE_CORES = 0.002
TICK = 1.0  # seconds between two listings of the pods


@dataclass
class Life:
    """One pod while it runs: where, at what load, from when to when (``end`` is inf while it runs)."""

    name: str
    uid: str
    workload: str
    node: str
    cores: float
    start: float
    initial: bool
    end: float = math.inf
    # counters: the container, the pause container, the pod cgroup (both together)
    used: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def alive(self, at: float) -> bool:
        return self.start <= at < self.end


class LiveUsage:
    """The exporter: follows the pods of ``namespace`` on ``nodes`` from ``now`` (the end of the history)."""

    def __init__(self, admin: Admin, namespace: str, nodes: tuple[str, ...], *, history_start: float, now: float):
        self.admin, self.namespace, self.nodes = admin, namespace, nodes
        self.history_start, self.began = history_start, now
        self.allocatable = {
            n["metadata"]["name"]: cpu_millis(n["status"]["allocatable"]["cpu"]) / 1000
            for n in admin.items("v1", "Node")
        }
        self._lock = threading.Lock()
        self._lives: dict[str, Life] = {}
        self._node_used: dict[str, float] = {}
        self._last = now
        self._stop = threading.Event()
        self.errors: list[str] = []
        for life in self._running(now):
            life.initial, life.start = True, history_start
            span = now - history_start
            life.used = [COUNTER_START + life.cores * span, COUNTER_START + PAUSE_CORES * span,
                         COUNTER_START + (life.cores + PAUSE_CORES) * span]  # fmt: skip
            self._lives[life.uid] = life
        for node in nodes:
            self._node_used[node] = COUNTER_START + self.cores(node, now) * (now - history_start)
        self._poller = threading.Thread(target=self._follow, name="live-usage", daemon=True)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._http = threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True)

    # -- the truth ---------------------------------------------------------------------------------

    def lives(self) -> list[Life]:
        with self._lock:
            return sorted(self._lives.values(), key=lambda life: (life.start, life.name))

    def cores(self, node: str, at: float) -> float:
        """The node's real CPU at ``at``: system daemons, pods and their pause containers."""
        return self._node_cores(node, at)

    def percent(self, node: str, at: float) -> float:
        return 100 * self.cores(node, at) / self.allocatable[node]

    def _node_cores(self, node: str, at: float) -> float:
        with self._lock:
            running = [life for life in self._lives.values() if life.node == node and life.alive(at)]
        return SYSTEM_CORES + sum(life.cores + PAUSE_CORES for life in running)

    # -- following the API server ------------------------------------------------------------------

    def _running(self, at: float) -> Iterator[Life]:
        for pod in self.admin.items("v1", "Pod", self.namespace):
            meta, spec = pod["metadata"], pod["spec"]
            if pod["status"].get("phase") != "Running" or "deletionTimestamp" in meta or not spec.get("nodeName"):
                continue
            labels = meta.get("labels", {})
            cores = int(labels[LOAD_LABEL]) / 1000
            yield Life(meta["name"], meta["uid"], labels["app"], spec["nodeName"], cores, at, initial=False)

    def _follow(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self.tick(time.time())
            except Exception as error:  # kept and reported by the test; the exporter goes on
                self.errors.append(repr(error))

    def tick(self, now: float) -> None:
        """Advances every counter to ``now`` at the loads of the last listing, then lists the pods again."""
        running = {life.uid: life for life in self._running(now)}
        with self._lock:
            dt = now - self._last
            for life in self._lives.values():
                if life.end == math.inf:
                    for index, cores in enumerate((life.cores, PAUSE_CORES, life.cores + PAUSE_CORES)):
                        life.used[index] += cores * dt
            for node in self.nodes:
                live = [x for x in self._lives.values() if x.node == node and x.end == math.inf]
                self._node_used[node] += (SYSTEM_CORES + sum(x.cores + PAUSE_CORES for x in live)) * dt
            for uid, life in self._lives.items():
                if life.end == math.inf and uid not in running:
                    life.end = now
            for uid, life in running.items():
                self._lives.setdefault(uid, life)
            self._last = now

    # -- cAdvisor series -----------------------------------------------------------------------------

    def exposition(self) -> str:
        lines = [f"# TYPE {METRIC.removesuffix('_total')} counter"]
        with self._lock:
            for node in self.nodes:
                lines.append(_line({**node_labels(node), "id": "/"}, self._node_used[node]))
            for life in self._lives.values():
                if life.end != math.inf:
                    continue
                cgroups = PodCgroups.of(node_labels(life.node), self.namespace, life.name, life.uid, ("app",))
                for labels, value in zip((*cgroups.containers, cgroups.pause, cgroups.whole), life.used, strict=True):
                    lines.append(_line(labels, value))
        return "\n".join(lines) + "\n"

    def history(self, step: float = 15.0) -> list[Series]:
        """The series from ``history_start`` to the start, constant at the initial placement; the live counters
        continue them (same labels, same values at the start)."""
        count = int((self.began - self.history_start) // step)
        stamps = [self.began - (count - i) * step for i in range(count + 1)]
        assert stamps[0] == self.history_start, "the history must span a whole number of steps"
        out = [
            Series(METRIC, {**node_labels(node), "id": "/"}, counter(constant(self.cores(node, self.began)), stamps))
            for node in self.nodes
        ]
        for life in self.lives():
            cgroups = PodCgroups.of(node_labels(life.node), self.namespace, life.name, life.uid, ("app",))
            rates = (life.cores, PAUSE_CORES, life.cores + PAUSE_CORES)
            for labels, cores in zip((*cgroups.containers, cgroups.pause, cgroups.whole), rates, strict=True):
                out.append(Series(METRIC, labels, counter(constant(cores), stamps)))
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        usage = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = usage.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    @property
    def target(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def __enter__(self) -> LiveUsage:
        self._poller.start()
        self._http.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._poller.join(timeout=10)


def _line(labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{METRIC}{{{text}}} {value:.6f}"
