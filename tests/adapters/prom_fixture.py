"""Real Prometheus (and other real servers) for tests, on 127.0.0.1 with temporary data dirs.

History is written as OpenMetrics text and turned into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics`` *before* the server starts, so queries can be
evaluated at a fixed past ``time=`` with no dependence on the wall clock.

The binaries come from Debian packages. A missing binary always fails the run (never a skip), with
the package to install named in the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.ports import free_port

DEBIAN_PACKAGE = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
}


def require_binary(name: str) -> str:
    """Path of a server binary, or a test failure naming the Debian package that provides it."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if path is None:
        package = DEBIAN_PACKAGE.get(name, name)
        pytest.fail(
            f"{name} not found on PATH: install the Debian package {package!r} (apt-get install {package}). "
            "These tests run against the real server and are never skipped.",
            pytrace=False,
        )
    return path


def run_promtool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS...`` (failing the test when promtool is missing); the caller judges the exit code."""
    return subprocess.run(
        [require_binary("promtool"), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# -- OpenMetrics history ---------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One time series: sample name (``..._total`` for counters), labels, (epoch s, value) in time order."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[tuple[float, float]]
    kind: str = "counter"  # counter | gauge


def write_openmetrics(path: Path, series: Iterable[Series]) -> int:
    """Writes the series as OpenMetrics text (one block per metric family); returns the sample count."""
    families: dict[str, list[Series]] = {}
    kinds: dict[str, str] = {}
    for one in series:
        family = one.name.removesuffix("_total") if one.kind == "counter" else one.name
        families.setdefault(family, []).append(one)
        kinds[family] = one.kind
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for family, members in families.items():
            out.write(f"# TYPE {family} {kinds[family]}\n")
            for one in members:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(one.labels.items()))
                prefix = f"{one.name}{{{labels}}} " if labels else f"{one.name} "
                last = float("-inf")
                for stamp, value in one.samples:
                    if stamp <= last:
                        raise ValueError(f"{one.name}{{{labels}}}: samples out of time order at {stamp}")
                    last = stamp
                    out.write(f"{prefix}{value!r} {_stamp(stamp)}\n")
                    count += 1
        out.write("# EOF\n")
    return count


def backfill(series: Iterable[Series], data_dir: Path, workdir: Path) -> None:
    """Turns the series into TSDB blocks in ``data_dir`` with promtool (2 h blocks: Prometheus 2.42's
    promtool has no --max-block-duration for OpenMetrics input)."""
    source = workdir / "history.om.txt"
    if write_openmetrics(source, series) == 0:
        return
    done = run_promtool("tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(data_dir))
    if done.returncode != 0:
        pytest.fail(f"promtool could not backfill {source}:\n{done.stdout}\n{done.stderr}", pytrace=False)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _stamp(seconds: float) -> str:
    return format(seconds, ".3f").rstrip("0").rstrip(".")


# -- server processes ------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A real server binary on 127.0.0.1, started on a free port and awaited on a readiness URL.

    ``argv`` is built for a given port (so a port taken in between is retried with another one).
    """

    name: str
    workdir: Path
    argv_for_port: Callable[[int], list[str]]
    ready_path: str
    startup_timeout: float = 30.0
    port: int = 0
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The running server's process id (benchmarks read its CPU and memory from /proc)."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> None:
        for _attempt in range(3):
            self.port = free_port()
            argv = self.argv_for_port(self.port)
            with self.log_path.open("ab") as log:
                self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
            if self._await_ready():
                return
            if "address already in use" not in self.log_tail():
                break
        tail = self.log_tail()
        self.stop()
        pytest.fail(f"{self.name} did not become ready; last log lines:\n{tail}", pytrace=False)

    def _await_ready(self) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.url + self.ready_path, timeout=1) as answer,
            ):
                if answer.status == 200:
                    return True
            time.sleep(0.05)
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: {scrape_interval}
  evaluation_interval: 30s
{rule_files}scrape_configs: {scrape_configs}
remote_read: {remote_read}
"""


class PrometheusServer:
    """The real Prometheus binary with backfilled history and no scrape targets.

    ``rules`` maps a file name to the text of a rule file (recording or alerting rules);
    ``extra_args`` are added to the command line (for example ``--query.lookback-delta=10m``);
    ``scrape_configs``: Prometheus' own ``scrape_configs`` entries (with their relabelling), scraped every
    ``scrape_interval``; ``remote_read``: its ``remote_read`` entries (one whose endpoint fails makes every
    query it takes part in answer with ``warnings``).
    """

    def __init__(
        self,
        workdir: Path,
        history: Iterable[Series] = (),
        *,
        rules: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        retention: str = "30d",
        scrape_configs: Sequence[Mapping[str, object]] = (),
        scrape_interval: str = "30s",
        remote_read: Sequence[Mapping[str, object]] = (),
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = require_binary("prometheus")
        backfill(history, self.data_dir, workdir)
        rule_paths = []
        for file_name, text in (rules or {}).items():
            (workdir / file_name).write_text(text, encoding="utf-8")
            rule_paths.append(str(workdir / file_name))
        listed = "".join(f"  - {json.dumps(p)}\n" for p in rule_paths)
        config = workdir / "prometheus.yml"
        config.write_text(
            PROMETHEUS_CONFIG.format(
                rule_files=f"rule_files:\n{listed}" if listed else "",
                scrape_configs=json.dumps(list(scrape_configs)),  # JSON is YAML
                scrape_interval=scrape_interval,
                remote_read=json.dumps(list(remote_read)),
            )
        )

        def argv(port: int) -> list[str]:
            return [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--storage.tsdb.retention.time={retention}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
                *extra_args,
            ]

        self.process = ServerProcess("prometheus", workdir, argv, "/-/ready")

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def start(self) -> PrometheusServer:
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop()

    def query(self, promql: str, at: float) -> object:
        """Raw instant query over plain urllib (for assertions that must not go through the adapter)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)["data"]


# -- an honest fake at the HTTP boundary -----------------------------------------------------


ASKED_TIME = "<the request's time>"
"""In a canned JSON answer, stands for the request's ``time`` parameter (a range query's ``end``), written as
a number there: the time each sample of an instant vector carries, as Prometheus answers."""


@dataclass
class CannedAnswer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0


@dataclass
class CannedRequest:
    path: str
    headers: Mapping[str, str]
    method: str = "GET"
    body: bytes = b""


class CannedHttpServer:
    """A tiny HTTP server on 127.0.0.1 that answers every request with ``answer`` and records it.

    For what a real server cannot be made to do on demand: 503s, silence past a timeout, bodies that
    are not a Prometheus answer.
    """

    def __init__(self) -> None:
        self.answer = CannedAnswer()
        self.requests: list[CannedRequest] = []
        self._release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append(CannedRequest(self.path, dict(self.headers.items()), self.command, body))
                answer = outer.answer
                if answer.delay:
                    outer._release.wait(answer.delay)
                sent = answer.body
                if _ASKED_TIME in sent:
                    form = urllib.parse.urlsplit(self.path).query if self.command == "GET" else body.decode()
                    asked = dict(urllib.parse.parse_qsl(form))
                    sent = sent.replace(_ASKED_TIME, (asked.get("time") or asked.get("end") or "0").encode())
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(sent)))
                    self.end_headers()
                    self.wfile.write(sent)
                except OSError:  # the client gave up (timeout)
                    pass

            do_POST = do_GET

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, status: int = 200, body: object = b"", *, delay: float = 0.0, content_type: str = "") -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        kind = content_type or ("application/json" if not isinstance(body, bytes) else "text/plain")
        self.answer = CannedAnswer(status, raw, kind, delay)
        self.requests.clear()

    def release(self) -> None:
        """Answer the requests held by ``delay`` now, and the later ones at once."""
        self._release.set()

    def __enter__(self) -> CannedHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


_ASKED_TIME = json.dumps(ASKED_TIME).encode()

StartPrometheus = Callable[..., PrometheusServer]
"""The ``start_prometheus`` fixture: ``start_prometheus(history, rules=..., extra_args=...)``."""


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nothing listens on (bound, never listening, so not reused meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
