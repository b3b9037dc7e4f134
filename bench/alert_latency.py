"""Alert-to-first-eviction latency of `rebalancer serve` on a big test cluster.

    .venv/bin/python -m bench.alert_latency                        # 5,000 nodes, 150,000 pods, 20 alerts
    .venv/bin/python -m bench.alert_latency --nodes 500 --pods 15000 --alerts 10
    .venv/bin/python -m bench.alert_latency --resources cpu,memory,pods    # memory and pod-count thresholds too

The test API server (its own process) serves the synthetic cluster; a canned Prometheus in this process
answers the usage queries in Prometheus' wire format (a node turns hot only when the benchmark arms it, so
the start-up cycle has nothing to do); `rebalancer serve` runs as a real process. For each alert the
benchmark arms a node, posts an Alertmanager webhook body and takes the time at which the test API
server received the first eviction of one of that node's pods (its own record, so polling for it costs
nothing of the figure). Prints p50 / p95 / max over the alerts; a figure, not a timed test.

``--resources cpu,memory,pods``: the policy has memory and pod-count thresholds too, and the canned
Prometheus answers the memory queries (some nodes run memory-hot in the steady-state cycles).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.cluster_gen import ALLOCATABLE_MEMORY, NAMESPACES, node_index_of
from bench.harness import not_scraped_here, resource_set, thresholds
from bench.serve_cluster import EVICTIONS_PATH
from bench.snapshot_bench import kubeconfig
from tests.adapters.prom_fixture import free_port

ROOT = Path(__file__).resolve().parent.parent
ALLOCATABLE_M = 31750
HOT_M = int(ALLOCATABLE_M * 0.95)
POD_MEMORY = b"629145600"  # 600 MiB a pod: 30 pods are 18 GiB, under a third of a node


class CannedPrometheus:
    """Answers the default usage queries (memory too) from a model of the cluster; ``armed`` nodes run hot,
    ``memory_armed`` nodes memory-hot.

    The answers are in Prometheus' wire format, rendered from pre-encoded series (a real Prometheus
    answers a 5,000-series vector in a few milliseconds; ``json.dumps`` of it here would cost the
    benchmark's own process about 15 ms per query, on the same two cores as the service)."""

    def __init__(self, nodes: int, pods: int) -> None:
        self.nodes = [f"node-{i:05d}" for i in range(nodes)]
        self.pods_on: dict[str, list[tuple[str, str]]] = {n: [] for n in self.nodes}
        for i in range(pods):
            name = f"svc-{(i // 7) % 2000:04d}-5d8f9c7b6-{i:06x}"
            self.pods_on[f"node-{node_index_of(i, nodes):05d}"].append((NAMESPACES[i % len(NAMESPACES)], name))
        self.armed: set[str] = set()
        self.memory_armed: set[str] = set()
        self.memory_queries = 0  # answered: a policy without memory thresholds asks none
        self._all_pods: dict[bool, bytes] = {}
        self._node_metrics = [_metric({"node": n}) for n in self.nodes]
        self._usual = [_number(self.node_usage_m(i, n) / 1000) for i, n in enumerate(self.nodes)]
        self._usual_memory = [_number(ALLOCATABLE_MEMORY * (0.15 if i % 4 == 3 else 0.45)) for i in range(nodes)]

    def node_usage_m(self, index: int, name: str) -> int:
        if name in self.armed:
            return HOT_M
        return int(ALLOCATABLE_M * (0.10 if index % 4 == 3 else 0.45))

    def answer(self, query: str, at: float) -> bytes:
        if " unless " in query or not_scraped_here(query):  # no young series; no fallback node source needed
            return _vector((), at)
        if "timestamp(" in query:
            fresh = _number(at - 15)
            return _vector(((m, fresh) for m in self._node_metrics), at)
        memory = "container_memory_working_set_bytes" in query
        self.memory_queries += memory
        if 'id="/"' in query:
            hot, armed, usual = (
                (_number(ALLOCATABLE_MEMORY * 0.85), self.memory_armed, self._usual_memory)
                if memory
                else (_number(HOT_M / 1000), self.armed, self._usual)
            )
            values = (hot if n in armed else u for n, u in zip(self.nodes, usual, strict=True))
            return _vector(zip(self._node_metrics, values, strict=True), at)
        match = re.search(r'node=~"([^"]*)"', query)
        if match is None:
            return self._every_pod(at, memory)
        wanted = match.group(1).replace("\\\\", "\\").replace("\\.", ".").split("|")
        value = POD_MEMORY if memory else b"0.6"
        pods = [(_metric({"namespace": ns, "pod": p}), value) for n in wanted for ns, p in self.pods_on.get(n, [])]
        return _vector(pods, at)

    def _every_pod(self, at: float, memory: bool) -> bytes:
        """Every pod's series, built once and stamped with ``at`` (each sample carries the evaluation time)."""
        if memory not in self._all_pods:
            value = POD_MEMORY if memory else b"0.2"
            series = [(_metric({"namespace": ns, "pod": p}), value) for pods in self.pods_on.values() for ns, p in pods]
            self._all_pods[memory] = _vector(series, 0)
        return stamped(self._all_pods[memory], at)


def _metric(labels: dict[str, str]) -> bytes:
    return json.dumps(labels, separators=(",", ":")).encode()


def _number(value: float) -> bytes:
    return f"{value:.6f}".encode()


def _vector(series: Iterable[tuple[bytes, bytes]], at: float) -> bytes:
    stamp = f"{at:.3f}".encode() if at else b"0"
    result = b",".join(b'{"metric":%s,"value":[%s,"%s"]}' % (metric, stamp, value) for metric, value in series)
    return b'{"status":"success","data":{"resultType":"vector","result":[' + result + b"]}}"


def stamped(body: bytes, at: float) -> bytes:
    """An answer built with the time 0 (``_vector(series, 0)``), its samples' time made ``at``."""
    return body.replace(b'"value":[0,', b'"value":[%s,' % f"{at:.3f}".encode())


def serve_prometheus(model: CannedPrometheus) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real Prometheus

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stall

        def do_GET(self) -> None:
            self._answer(urllib.parse.urlsplit(self.path).query)

        def do_POST(self) -> None:
            self._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())

        def _answer(self, raw: str) -> None:
            params = dict(urllib.parse.parse_qsl(raw))
            query = params.get("query", "")
            if urllib.parse.urlsplit(self.path).path.endswith("/query_range"):  # a model that answers range queries
                start, end, step = (float(params[k]) for k in ("start", "end", "step"))
                body = model.answer_range(query, start, end, step)  # type: ignore[attr-defined]
            else:
                body = model.answer(query, float(params.get("time") or time.time()))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _first_cycle_done(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return False
    return re.search(r'rebalancer_cycle_duration_seconds_count\{trigger="schedule"\} [1-9]', text) is not None


def evictions(kube_url: str, after: int, wait: float = 0.0) -> list[dict[str, Any]]:
    """The eviction requests the test API server received from the ``after``-th on, waiting up to ``wait``
    seconds for one (bench.serve_cluster)."""
    url = f"{kube_url}{EVICTIONS_PATH}?after={after}&wait={wait}"
    with urllib.request.urlopen(url, timeout=wait + 30) as answer:
        found: list[dict[str, Any]] = json.load(answer)
    return found


def first_eviction_at(kube_url: str, after: int, pods: set[tuple[str, str]], deadline: float) -> float | None:
    """When the API server received the first accepted eviction of one of ``pods`` (wall clock). The
    server holds the request until an eviction arrives, so the benchmark does not poll while it waits."""
    while time.monotonic() < deadline:
        records = evictions(kube_url, after, wait=min(5.0, max(0.0, deadline - time.monotonic())))
        for record in records:
            if record["code"] == 201 and (record["namespace"], record["name"]) in pods:
                return float(record["receivedAt"])
        after += len(records)
    return None


def post_alert(port: int, node: str, i: int) -> None:
    alert = {"status": "firing", "labels": {"alertname": "NodeCPUHigh", "node": node}, "annotations": {},
             "startsAt": "2026-11-22T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
             "fingerprint": f"{i:016x}"}  # fmt: skip
    body = json.dumps({"version": "4", "groupKey": f'{{}}:{{node="{node}"}}', "truncatedAlerts": 0,
                       "status": "firing", "receiver": "rebalancer", "groupLabels": {"node": node},
                       "commonLabels": alert["labels"], "commonAnnotations": {}, "externalURL": "",
                       "alerts": [alert]}).encode()  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhook/alertmanager", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202, answer.status


def write_policy(
    path: Path,
    prometheus_url: str,
    ports: tuple[int, int],
    interval: str = "24h",
    max_per_cycle: int = 0,
    resources: str = "cpu",
) -> None:
    """``ports``: the webhook's (posted to without a token: loopback only), then /metrics'. ``resources``: the
    resources the thresholds name (comma-separated, cpu first)."""
    limits = f"limits: {{cluster: {{maxPerCycle: {max_per_cycle}}}}}\n" if max_per_cycle else ""
    low, high = thresholds(resources, cpu_target=70)
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "pools: {label: node-pool}\n"
        f"strategies:\n- {{kind: LowNodeUtilization, thresholds: {{{low}}}, targetThresholds: {{{high}}}, "
        f"maxNoOfPodsToEvictPerNode: 1, schedule: {{interval: {interval}}}}}\n"
        f"{limits}"
        # placement prediction (on by default) passes over a pod whose replacement lands back, and with the
        # generator's equal requests every replacement would: the landing guard, its recommended pairing,
        # marks the hot node ahead of the eviction (a node patch on the alert path, timed with it)
        "landingGuard: {pools: [{pool: general}]}\n"
        "state: {namespace: rebalancer}\n"
        f"service: {{host: 127.0.0.1, port: {ports[0]}, metricsPort: {ports[1]}, alertFactsMaxAge: 1h, "
        "reloadInterval: 1s, webhook: {allowUnauthenticated: true}, leaderElection: {enabled: false}}\n"
    )


_TIMINGS = re.compile(r"(alert|schedule) cycle timings \(ms\): (.*)")
_FIGURE = re.compile(r"(@?[a-z-]+)=\+?([0-9.]+)")


def cycle_timings(log_text: str, trigger: str) -> list[dict[str, float]]:
    """Per cycle of ``trigger`` in serve's log: its steps in ms, its moments (``@name``) in ms after the
    origin, and ``origin`` (epoch seconds); see rebalancer.domain.timeline."""
    found = []
    for kind, text in _TIMINGS.findall(log_text):
        if kind == trigger:
            found.append({name: float(value) for name, value in _FIGURE.findall(text)})
    return found


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(q * len(ordered)) - 1)]


def print_row(name: str, values: list[float]) -> None:
    if values:
        print(f"  {name:<34} median {statistics.median(values):7.1f} ms   p95 {quantile(values, 0.95):7.1f} ms")


def print_steps(timings: list[dict[str, float]]) -> None:
    steps = [k for k in timings[0] if not k.startswith("@") and k not in ("origin", "gc")] if timings else []
    for step in steps:
        print_row(f"  step {step}", [t.get(step, 0.0) for t in timings])
    print_row("  (collector pauses, within steps)", [t.get("gc", 0.0) for t in timings])


@dataclass
class AlertRun:
    posted: float  # epoch seconds, just before the POST
    answered: float  # the 202 came back
    landed: float  # the API server received the first eviction


def alert_breakdown(runs: list[AlertRun], timings: list[dict[str, float]]) -> None:
    """Where each alert's time went, lined up by wall clock across the three processes."""
    print("breakdown (serve's timeline per alert cycle; wall clocks of the processes lined up):")
    print_row("webhook POST until 202 (bench)", [(r.answered - r.posted) * 1000 for r in runs])
    paired = list(zip(runs, timings, strict=False))
    print_row("POST until queued in serve", [(t["origin"] - r.posted) * 1000 for r, t in paired])
    print_row("queued until the worker began", [t["@picked"] for t in timings])
    print_steps(timings)
    sent = [(r, t) for r, t in paired if "@eviction-sent" in t]
    print_row("queued until the eviction was sent", [t["@eviction-sent"] for _, t in sent])
    print_row(
        "eviction sent until received (API)",
        [(r.landed - t["origin"]) * 1000 - t["@eviction-sent"] for r, t in sent],
    )


def steady_cycles(log_text: str, after: int, wanted: int) -> list[dict[str, float]]:
    return cycle_timings(log_text, "schedule")[after : after + wanted]


PLAN_STEPS = ("facts", "usage", "snapshot", "plan")


def steady_report(timings: list[dict[str, float]], durations: list[float]) -> None:
    print(f"steady-state scheduled cycles on the warm watch cache ({len(timings)} cycles):")
    print_row("whole cycle (serve's log)", durations)
    print_row("plan cycle: facts+usage+snapshot+plan", [sum(t.get(s, 0.0) for s in PLAN_STEPS) for t in timings])
    print_steps(timings)


def main() -> None:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--alerts", type=int, default=20)
    parser.add_argument("--steady-cycles", type=int, default=5, help="scheduled cycles to time after the alerts")
    parser.add_argument(
        "--gap", type=float, default=0.0, help="seconds between an eviction and the next alert (0: back to back)"
    )
    parser.add_argument(
        "--resources",
        type=resource_set,
        default="cpu",
        help="the resources the thresholds name, comma-separated (cpu, memory, pods; default cpu)",
    )
    args = parser.parse_args()
    kube = subprocess.Popen(
        [sys.executable, "-m", "bench.serve_cluster", "--nodes", str(args.nodes), "--pods", str(args.pods)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert kube.stdout is not None
    ready = kube.stdout.readline().split()
    kube_url = ready[1]
    model = CannedPrometheus(args.nodes, args.pods)
    prometheus = serve_prometheus(model)
    prometheus_url = f"http://127.0.0.1:{prometheus.server_address[1]}"
    port, metrics_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp())
    policy = workdir / "policy.yaml"
    write_policy(policy, prometheus_url, (port, metrics_port), resources=args.resources)
    log_path = workdir / "serve.log"
    log = log_path.open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "rebalancer", "serve", "--log-level", "DEBUG", "--policy", str(policy),
         "--kubeconfig", kubeconfig(kube_url)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        started = time.monotonic()
        while not _first_cycle_done(metrics_port):  # alerts must not queue behind the start-up cycle
            if serve.poll() is not None or time.monotonic() - started > 600:
                raise SystemExit("serve never finished its first cycle:\n" + log_path.read_text()[-3000:])
            time.sleep(0.2)
        print(f"cluster: {args.nodes} nodes, {args.pods} pods, thresholds on {args.resources}; "
              "serve ready (first full cycle) after "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
        general = [n for i, n in enumerate(model.nodes) if i % 5 in (0, 1, 2) and i % 4 != 3]
        runs = []
        for i, node in enumerate(general[: args.alerts]):
            time.sleep(args.gap)
            seen = len(evictions(kube_url, 0))
            model.armed.add(node)
            posted = time.time()
            post_alert(port, node, i)
            answered = time.time()
            landed = first_eviction_at(kube_url, seen, set(model.pods_on[node]), time.monotonic() + 60)
            if landed is None:
                raise SystemExit(f"no eviction from {node}:\n" + log_path.read_text()[-3000:])
            runs.append(AlertRun(posted, answered, landed))
            model.armed.discard(node)
        time.sleep(0.5)  # the last cycle logs its timings after its Event
        latencies = sorted(r.landed - r.posted for r in runs)
        print(f"alert-to-first-eviction over {len(latencies)} alerts (received by the API server): "
              f"p50 {statistics.median(latencies) * 1000:.0f} ms, p95 {quantile(latencies, 0.95) * 1000:.0f} ms, "
              f"max {latencies[-1] * 1000:.0f} ms (target p95 <= 300 ms)")  # fmt: skip
        log_text = log_path.read_text()
        cycles = [float(c) for c in re.findall(r"alert cycle for .*; ([0-9.]+) s$", log_text, re.M)]
        if cycles:
            print(f"  of which the alert cycle itself (serve's log): median {statistics.median(cycles) * 1000:.0f} ms")
        alert_breakdown(runs, cycle_timings(log_text, "alert"))
        if args.steady_cycles:
            before = len(cycle_timings(log_text, "schedule"))
            # about 50 hot nodes, the plan's work; with memory thresholds every other one is hot on memory alone
            hot = general[args.alerts :: 50]
            memory_hot = hot[1::2] if "memory" in args.resources else []
            model.armed.update(n for n in hot if n not in memory_hot)
            model.memory_armed.update(memory_hot)
            write_policy(policy, prometheus_url, (port, metrics_port), "4s", 1, args.resources)
            deadline = time.monotonic() + 60 + 20 * args.steady_cycles
            while len(steady_cycles(log_path.read_text(), before, args.steady_cycles)) < args.steady_cycles:
                if serve.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("no steady-state cycles:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
            log_text = log_path.read_text()
            durations = [float(c) * 1000 for c in re.findall(r"schedule cycle: .*; ([0-9.]+) s$", log_text, re.M)]
            steady_report(steady_cycles(log_text, before, args.steady_cycles),
                          durations[before : before + args.steady_cycles])  # fmt: skip
        print(f"memory queries answered by the canned Prometheus: {model.memory_queries}")
    finally:
        serve.terminate()
        serve.wait(timeout=60)
        log.close()
        prometheus.shutdown()
        if kube.stdin:
            kube.stdin.close()
        kube.wait(timeout=30)


if __name__ == "__main__":
    main()
