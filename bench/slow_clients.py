"""Slow clients against `rebalancer serve`'s two listeners: probes and alerts while a crowd trickles.

The server runs in a child process (its RSS is its own): the production webhook and status apps behind
the production server, with the policy's default limits (``--header-timeout`` aside) and a stand-in runner
that queues every alert at once. This process holds ``--per-port`` connections on each listener, each
sending one byte a second of a request head that never ends, without a token, and opening a new
connection whenever the server closes one (at the header timeout), as an attacker would. Meanwhile it
asks ``/healthz`` and ``/readyz`` (a fresh connection each, as the kubelet does, 1 s timeout) and posts
legitimate alerts with the token; the same probes and alerts with no crowd are the baseline.

Traffic goes to 127.0.0.1 only; every loop is bounded in time and the crowd stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import ready_child
from rebalancer.service import raise_open_files_limit

TOKEN = "bench-token"
PROBES = ("/healthz", "/readyz")
PROBE_TIMEOUT_S = 1.0
HEADS = {  # what each slow client trickles: a request head that never ends
    "webhook": b"POST /webhook/alertmanager HTTP/1.1\r\nHost: bench\r\nX-Slow: ",
    "status": b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Slow: ",
}
ALERT = json.dumps(
    {
        "version": "4",
        "groupKey": '{}:{node="node-a"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "rebalancer",
        "groupLabels": {"node": "node-a"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "NodeCPUHigh", "node": "node-a"},
                "annotations": {},
                "startsAt": "2026-11-22T10:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": "0123456789abcdef",
            }
        ],
    }
).encode()


# -- the server, in the child ----------------------------------------------------------------------


def serve_child(header_timeout: float) -> None:
    """The child: both listeners on free ports; prints READY and the ports, serves until stdin closes."""
    from datetime import timedelta

    from rebalancer.app.serve import server_limits
    from rebalancer.policy import ServiceSettings
    from rebalancer.service import TokenFile, make_app, make_status_app, serve_http
    from rebalancer.service.metrics import Metrics
    from rebalancer.service.runner import AlertDecision

    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        token.write_text(TOKEN)
        metrics = Metrics()
        settings = ServiceSettings(header_timeout=timedelta(seconds=header_timeout))
        webhook_limits, status_limits = server_limits(settings)
        app = make_app(
            metrics=metrics,
            submit=lambda alerts: [AlertDecision(a.node, "queued") for a in alerts],
            is_leader=lambda: True,
            known_nodes=lambda: frozenset({"node-a"}),
            token=TokenFile(token),
            max_concurrent_requests=settings.max_concurrent_requests,
        )
        status = serve_http(make_status_app(metrics=metrics, ready=lambda: True), "127.0.0.1", 0, limits=status_limits)
        webhook = serve_http(app, "127.0.0.1", 0, limits=webhook_limits)
        metrics.http_connections("webhook", lambda: webhook.open_connections)
        metrics.http_connections("status", lambda: status.open_connections)
        print("READY", webhook.port, status.port, webhook_limits.max_connections, flush=True)
        sys.stdin.read()
        webhook.stop()
        status.stop()


@dataclass(frozen=True)
class Server:
    pid: int
    ports: dict[str, int]
    max_connections: int

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


@contextmanager
def served(header_timeout: float) -> Iterator[Server]:
    argv = [sys.executable, "-m", "bench.slow_clients", "--child", "--header-timeout", str(header_timeout)]
    with ready_child(argv, "the server", 4) as (pid, ready):
        yield Server(pid, {"webhook": int(ready[1]), "status": int(ready[2])}, int(ready[3]))


# -- the crowd -------------------------------------------------------------------------------------


class SlowCrowd:
    """``per_port`` slow connections on each of ``ports`` (name -> port), from an event loop in a thread of
    its own; they open over ``ramp_s`` seconds and all end after ``max_s`` seconds at the latest."""

    def __init__(self, ports: dict[str, int], per_port: int, *, ramp_s: float = 2.0, max_s: float = 120.0) -> None:
        self._ports, self._per_port, self._ramp_s, self._max_s = ports, per_port, ramp_s, max_s
        self.open = dict.fromkeys(ports, 0)  # connections open now, per listener (the loop writes)
        self.closed_by_server = 0
        self.failed_connects = 0
        self._stop: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),), daemon=True)

    def __enter__(self) -> SlowCrowd:
        raise_open_files_limit(4 * self._per_port * len(self._ports) + 512)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self._loop.close()

    def held(self) -> dict[str, int]:
        return dict(self.open)

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        deadline = time.monotonic() + self._max_s
        clients = [
            self._client(name, port, self._ramp_s * i / self._per_port, deadline)
            for name, port in self._ports.items()
            for i in range(self._per_port)
        ]
        await asyncio.gather(*clients)

    async def _client(self, name: str, port: int, delay: float, deadline: float) -> None:
        assert self._stop is not None
        await asyncio.sleep(delay)
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                self.failed_connects += 1
                await asyncio.sleep(1.0)
                continue
            self.open[name] += 1
            try:
                if await self._trickle(HEADS[name], reader, writer, deadline):
                    self.closed_by_server += 1
            finally:
                self.open[name] -= 1
                writer.close()
                with suppress(OSError):
                    await writer.wait_closed()

    async def _trickle(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float
    ) -> bool:
        """One byte a second (the head, then padding) until the server closes (True) or the crowd stops."""
        assert self._stop is not None
        sent = 0
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                writer.write(head[sent : sent + 1] if sent < len(head) else b"a")
                await writer.drain()
                sent += 1
                with suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await reader.read(1)  # the server answers nothing before the head ends: only EOF
                        return True
            except OSError:
                return True
        return False


# -- the legitimate traffic ------------------------------------------------------------------------


def probe(port: int, path: str) -> tuple[int, float]:
    """A probe as the kubelet sends it: a fresh connection, 1 s timeout; status 0 when none came in time."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        answer.read()
        return answer.status, time.monotonic() - started
    except OSError:
        return 0, time.monotonic() - started
    finally:
        conn.close()


def alert(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    try:
        conn.request("POST", "/webhook/alertmanager", ALERT, headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status
    except OSError:
        return 0
    finally:
        conn.close()


@dataclass
class Phase:
    probes: list[tuple[int, float]] = field(default_factory=list)
    alerts: list[int] = field(default_factory=list)
    held: list[dict[str, int]] = field(default_factory=list)
    rss_mb: float = 0.0

    @property
    def probes_ok(self) -> bool:
        return all(code == 200 and seconds < PROBE_TIMEOUT_S for code, seconds in self.probes)

    @property
    def accepted(self) -> float:
        return self.alerts.count(202) / len(self.alerts) if self.alerts else 0.0

    def held_min(self, name: str) -> int:
        return min((held[name] for held in self.held), default=0)

    def held_mean(self, name: str) -> float:
        return statistics.fmean(held[name] for held in self.held) if self.held else 0.0

    def latency_ms(self) -> tuple[float, float, float]:
        ms = sorted(seconds * 1000 for _, seconds in self.probes)
        return statistics.median(ms), ms[min(len(ms) - 1, int(0.95 * len(ms)))], ms[-1]


def measure(server: Server, seconds: float, crowd: SlowCrowd | None = None, interval: float = 0.1) -> Phase:
    """Probes every ``interval`` and alerts from a second thread, for ``seconds``."""
    phase = Phase()
    until = time.monotonic() + seconds

    def send_alerts() -> None:
        while time.monotonic() < until:
            phase.alerts.append(alert(server.ports["webhook"]))
            time.sleep(interval)

    sender = threading.Thread(target=send_alerts)
    sender.start()
    while time.monotonic() < until:
        for path in PROBES:
            phase.probes.append(probe(server.ports["status"], path))
        if crowd is not None:
            phase.held.append(crowd.held())
        time.sleep(interval)
    sender.join()
    phase.rss_mb = server.rss_mb()
    return phase


# -- the run ---------------------------------------------------------------------------------------


def figures(name: str, phase: Phase) -> str:
    p50, p95, most = phase.latency_ms()
    ok = sum(code == 200 for code, _ in phase.probes)
    return (
        f"{name}: probes {ok}/{len(phase.probes)} answered 200; latency p50 {p50:.1f} ms p95 {p95:.1f} ms "
        f"max {most:.1f} ms; alerts accepted {phase.alerts.count(202)}/{len(phase.alerts)} "
        f"({100 * phase.accepted:.1f} %); server RSS {phase.rss_mb:.0f} MB"
    )


def run(per_port: int, seconds: float, header_timeout: float) -> tuple[Phase, Phase, SlowCrowd]:
    with served(header_timeout) as server:
        print(
            f"slow clients: {per_port} per listener (one head byte a second, no token), held {seconds:.0f} s; "
            f"server: maxConnections {server.max_connections}, headerTimeout {header_timeout:g} s",
            flush=True,
        )
        baseline = measure(server, seconds / 2)
        print(figures("baseline (no slow clients)", baseline), flush=True)
        ramp_s = max(1.0, per_port / 500)
        with SlowCrowd(server.ports, per_port, ramp_s=ramp_s, max_s=ramp_s + seconds + 30) as crowd:
            time.sleep(ramp_s + 1.0)
            loaded = measure(server, seconds, crowd)
        print(figures("with the slow clients", loaded), flush=True)
    return baseline, loaded, crowd


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--per-port", type=int, default=1000, help="slow connections held on each listener")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long they are held while measuring")
    parser.add_argument("--header-timeout", type=float, default=10.0, help="the server's service.headerTimeout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        serve_child(args.header_timeout)
        return
    baseline, loaded, crowd = run(args.per_port, args.seconds, args.header_timeout)
    held = {name: (loaded.held_min(name), loaded.held_mean(name)) for name in ("webhook", "status")}
    print(
        f"connections held of {args.per_port}: webhook mean {held['webhook'][1]:.0f} min {held['webhook'][0]}, "
        f"status mean {held['status'][1]:.0f} min {held['status'][0]}; {crowd.closed_by_server} closed by the "
        f"server (header timeout) and reopened; {crowd.failed_connects} connects failed",
        flush=True,
    )
    grown = loaded.rss_mb - baseline.rss_mb
    per_connection_kb = grown * 1024 / max(1.0, held["webhook"][1] + held["status"][1])
    ratio = loaded.latency_ms()[1] / max(baseline.latency_ms()[1], 1e-3)
    print(
        f"against the baseline: probe p95 x{ratio:.2f}; server RSS {grown:+.0f} MB "
        f"({per_connection_kb:.1f} KB per connection held)"
    )
    print(
        f"verdict: every probe 200 within 1 s: {'yes' if loaded.probes_ok else 'NO'}; "
        f"alerts accepted >= 99 %: {'yes' if loaded.accepted >= 0.99 else 'NO'}",
        flush=True,
    )


if __name__ == "__main__":
    main()
