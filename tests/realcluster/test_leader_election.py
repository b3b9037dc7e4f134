"""Leader election between two processes: the real LeaseClient and LeaderElection against a real API server.

Each candidate is a separate Python process (``python -c``) that prints ``leading`` / ``following`` with
its ``time.time()`` (one clock for every process on the machine, the API server's too). The API server's
audit log says when each Lease write reached it, with the holder it wrote. Checked: exactly one leads; after ``kill -9`` of the leader the
other takes over, never before the dead leader's last renewal has expired and at most
``lease_duration + 2 * retry_period`` after the kill (the follower notices a renewal up to one retry period
late, and tries again up to one retry period late); a leader stopped with SIGTERM releases the Lease and
the other takes over at its next attempt.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rebalancer.actions.evictor import EvictorReport
from rebalancer.adapters.kube import LeaseClient, connect
from rebalancer.planning.plan import EvictionPlan
from rebalancer.policy import Policy
from rebalancer.service.leader import LeaderElection, LeaderElector, LeaseRecord
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Service, Trigger
from tests.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
NS, NAME = "rebalancer", "rebalancer"
ADMIN = "test-admin"

CANDIDATE = textwrap.dedent(
    """
    import signal, sys, threading, time
    from rebalancer.adapters.kube import LeaseClient, connect
    from rebalancer.service.leader import LeaderElection, LeaderElector

    kubeconfig, namespace, name, identity = sys.argv[1:5]
    lease, renew, retry = map(float, sys.argv[5:8])

    def say(*words):
        print(*words, f"{time.time():.6f}", flush=True)

    class FirstContact:
        def __init__(self, inner):
            self.inner, self.first = inner, True
        def get(self):
            record = self.inner.get()
            if self.first:
                self.first = False
                say("contact", record.holder if record is not None and record.holder else "-")
            return record
        def create(self, record):
            return self.inner.create(record)
        def update(self, record, resource_version):
            return self.inner.update(record, resource_version)

    leases = LeaseClient(connect(kubeconfig=kubeconfig), namespace, name, request_timeout=retry)
    elector = LeaderElector(FirstContact(leases), identity, lease, renew, retry)
    election = LeaderElection(elector, lambda leading: say("leading" if leading else "following"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    election.start()
    while not stop.wait(0.05):
        pass
    election.stop(release=True)
    say("stopped")
    """
)


@dataclass
class Candidate:
    """One candidate process and what it printed: (word, its time.time())."""

    identity: str
    process: subprocess.Popen[str]
    errors: Path
    lines: list[tuple[str, float]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, _, stamp = line.strip().rpartition(" ")
            with self.changed:
                self.lines.append((word, float(stamp)))
                self.changed.notify_all()
        with self.changed:
            self.lines.append(("<eof>", time.time()))
            self.changed.notify_all()

    def said(self, word: str) -> list[float]:
        with self.changed:
            return [at for said, at in self.lines if said == word]

    def words(self) -> list[str]:
        with self.changed:
            return [said.split()[0] for said, _ in self.lines]

    def wait_for(self, word: str, timeout: float) -> float:
        """When (its clock) the candidate first said ``word``; waits up to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = [at for said, at in self.lines if said.split()[0] == word]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0 or any(said == "<eof>" for said, _ in self.lines):
                    raise AssertionError(
                        f"{self.identity} never said {word!r}: {self.lines}\n{self.errors.read_text()}"
                    )
                self.changed.wait(min(left, 0.05))


@dataclass
class Write:
    at: float  # time.time() when the request reached the server
    method: str
    holder: str
    transitions: int


class Writes:
    """Every Lease write as it reached the server (a create may have been refused), from its audit log."""

    def __init__(self, plane: ControlPlane) -> None:
        self._plane = plane

    def __iter__(self) -> Iterator[Write]:
        for event in self._plane.audit(ADMIN):
            if event.resource == "leases" and event.verb in ("create", "update") and event.body is not None:
                spec = event.body.get("spec") or {}
                method = "POST" if event.verb == "create" else "PUT"
                yield Write(event.received, method, spec.get("holderIdentity") or "", spec.get("leaseTransitions", 0))


@pytest.fixture
def kubeconfig(cluster: ControlPlane, tmp_path: Path) -> Path:
    cluster.namespace(NS)
    assert cluster.pki is not None
    return cluster.kubeconfig(tmp_path / "kubeconfig", cluster.pki.admin_token)


@pytest.fixture
def writes(cluster: ControlPlane, kubeconfig: Path) -> Writes:
    return Writes(cluster)


Launch = Callable[[str, float, float, float], Candidate]


@pytest.fixture
def launch(kubeconfig: Path, tmp_path: Path) -> Iterator[Launch]:
    started: list[Candidate] = []

    def start(identity: str, lease: float, renew: float, retry: float) -> Candidate:
        errors = tmp_path / f"{identity}.stderr"
        args = [str(kubeconfig), NS, NAME, identity, str(lease), str(renew), str(retry)]
        with errors.open("w") as err:
            process = subprocess.Popen(
                [sys.executable, "-c", CANDIDATE, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True
            )
        candidate = Candidate(identity, process, errors)
        threading.Thread(target=candidate.read, name=f"read-{identity}", daemon=True).start()
        started.append(candidate)
        return candidate

    yield start
    for candidate in started:
        if candidate.process.poll() is None:
            candidate.process.kill()
        candidate.process.wait(timeout=10)


def one_leader(candidates: list[Candidate], timeout: float) -> tuple[Candidate, Candidate]:
    """Both in contact with the server; then (leader, follower), once one of them leads."""
    for c in candidates:
        c.wait_for("contact", timeout)
    deadline = time.monotonic() + timeout
    while not any(c.said("leading") for c in candidates):
        assert time.monotonic() < deadline, [c.lines for c in candidates]
        time.sleep(0.02)
    [leader] = [c for c in candidates if c.said("leading")]
    [follower] = [c for c in candidates if c is not leader]
    return leader, follower


def test_exactly_one_leads_and_a_killed_leader_is_replaced_after_its_lease(launch: Launch, writes: Writes) -> None:
    # renewals may fail for up to the renew deadline (2.4 s, six attempts) before the leader steps down: a
    # loaded 2-core machine (the suite beside the closed loop) can stall a process or the API server for
    # a second or two
    lease, renew, retry = 3.0, 2.4, 0.4
    candidates = [launch(ident, lease, renew, retry) for ident in ("a", "b")]
    leader, follower = one_leader(candidates, timeout=20)

    time.sleep(3 * lease)  # the follower would have taken over by now if renewals did not reach it
    assert leader.words() == ["contact", "leading"] and follower.words() == ["contact"]
    renewals = [w for w in writes if w.method == "PUT"]  # (both may have tried to create it: one was refused)
    assert {w.holder for w in renewals} == {leader.identity}
    # renewed every retry period (each attempt waits a period after the last one ended, so a slow API
    # server stretches it): at least half as often, where renewing at the renew deadline is a sixth
    assert len(renewals) >= 3 * lease / retry / 2, len(renewals)

    killed = time.time()
    os.kill(leader.process.pid, signal.SIGKILL)
    took_over = follower.wait_for("leading", timeout=10 * lease)

    last_renewal = max(w.at for w in writes if w.holder == leader.identity)
    takeover = next(w for w in writes if w.method == "PUT" and w.holder == follower.identity)
    assert takeover.at - last_renewal >= lease  # never before the dead leader's lease has run out
    assert took_over - killed <= lease + 2 * retry + 2.0, took_over - killed  # 2 s for a loaded machine
    assert takeover.transitions == 1


def test_a_stopped_leader_releases_and_the_other_takes_over_at_once(launch: Launch, writes: Writes) -> None:
    lease, renew, retry = 8.0, 3.0, 0.2  # without the release, the takeover would wait 8 s
    candidates = [launch(ident, lease, renew, retry) for ident in ("a", "b")]
    leader, follower = one_leader(candidates, timeout=20)
    time.sleep(2 * retry)

    stopping = time.time()
    leader.process.send_signal(signal.SIGTERM)
    took_over = follower.wait_for("leading", timeout=2 * lease)

    assert leader.process.wait(timeout=10) == 0
    leader.wait_for("<eof>", timeout=10)  # the process has exited; its reader may not have met the pipe's end yet
    assert leader.words() == ["contact", "leading", "following", "stopped", "<eof>"]
    assert leader.said("following")[0] <= took_over  # it had stopped leading before the other began
    # the leader's stop and release, then the other's next attempt: a few tenths of a second, with 3 s for a
    # loaded machine (signal, two processes and two writes), still well before the lease's 8 s
    assert took_over - stopping <= retry + 3.0, took_over - stopping
    released = [w for w in writes if w.holder == ""]
    assert len(released) == 1
    takeover = next(w for w in writes if w.method == "PUT" and w.holder == follower.identity)
    assert released[0].at <= takeover.at and takeover.transitions == 1


def test_serves_run_on_start_cycle_runs_as_soon_as_the_lease_is_held(
    kubeconfig: Path, writes: Writes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Lease still held by a replica that went away: the run-on-start cycle waits for it, then runs at
    once (not an interval later); the service's cycles and the real election, in this process."""
    caplog.set_level(logging.INFO, logger="rebalancer")
    leases = LeaseClient(connect(kubeconfig=str(kubeconfig)), NS, NAME, request_timeout=0.5)
    now = time.time()
    leases.create(LeaseRecord("departed", 2, now, now, 0))  # expires 2 s after a candidate first sees it
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}, "
        "schedule: {interval: 1h}}\n"
    )
    ran: list[float] = []

    def cycle(_: Policy, trigger: Trigger) -> CycleResult:
        ran.append(time.time())
        return CycleResult(EvictionPlan(time.time(), ()), EvictorReport())

    def leading() -> bool:
        return election.is_leader()

    service = Service(policy, cycle, Metrics(), leading)
    election = LeaderElection(LeaderElector(leases, "replica-a", 2, 1.5, 0.2), on_change=service.leadership_changed)
    election.start()
    service.start()
    try:
        deadline = time.monotonic() + 10
        while not ran:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.02)
        time.sleep(0.5)
    finally:
        service.stop()
        election.stop(release=True)
    acquired = next(w.at for w in writes if w.holder == "replica-a")
    assert len(ran) == 1  # once: the strategy's own schedule is an hour away
    # at once (the schedule's interval is an hour; 3 s for a loaded machine), and never before leading
    assert acquired <= ran[0] <= acquired + 3.0, ran[0] - acquired
    log = caplog.text
    assert log.index("not the leader yet") < log.index("replica-a is now the leader") < log.index("schedule cycle:")
