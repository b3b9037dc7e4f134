"""Planning work run ahead in a forked copy of this process, on a CPU that would otherwise idle.

After the listing, a CronJob cycle plans on one CPU while the others wait. A strategy that can split
its work (:class:`strategies.base.Offload`) hands the second part to :meth:`ForkOffload.start`: a
``fork()``-ed child computes it from the same memory (copy-on-write: nothing is sent to it) and
sends the result back pickled through a pipe, while this process does the first part. The strategy
decides whether the answer is still valid and otherwise computes the part itself, so a child that
fails, is slow, cannot be started or is cancelled costs time, never a different plan: every failure
here ends as "no answer" and a report, not as an exception.

Forking is only safe without other Python threads (a lock one of them holds at the fork stays held in
the child forever), and only pays with a second whole CPU: :func:`fork_offload` gives an offload only
then. Thread pools of C libraries have their own fork handlers (OpenBLAS's stops its workers; the
image sets ``OPENBLAS_NUM_THREADS=1`` anyway: the planner's numpy work is elementwise). Termination
signals are blocked across the ``fork()`` so that neither side runs a handler half-way; the child then
restores their defaults, sets itself an alarm at the deadline (so it ends even if this process was
killed), does no I/O but its pipe, and leaves with ``os._exit`` (no atexit handlers, no inherited
buffers flushed twice).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from rebalancer.machine import available_cpus

log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_SPLIT = 64  # items (hot nodes) below which a fork costs more than half the work saves
TIMEOUT_S = 120.0  # a child that has not answered by then is killed; the caller computes its part
GRACE_S = 5.0  # once asked, a child gets this long, or three times as long as the caller's own part
_CHUNK = 1 << 20
_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}


@dataclass(frozen=True, slots=True)
class AheadReport:
    """One child: how long it ran (fork to answer or end), its private memory (copied-on-write pages
    and its own allocations; None where /proc is missing, or not measured) and how it ended."""

    seconds: float
    private_mb: float | None
    outcome: str  # "answered", "cancelled", or why there was no answer


@dataclass(slots=True)
class ForkOffload:
    """Runs a part of a plan in a forked child. ``min_split``: the fewest items worth splitting
    (strategies ask). ``reports``: one per child, in order (benchmarks read the children's memory)."""

    min_split: int = MIN_SPLIT
    timeout_s: float = TIMEOUT_S
    reports: list[AheadReport] = field(default_factory=list)

    def start(self, work: Callable[[], T]) -> Forked[T]:
        """Fork a child that runs ``work()`` on this process's memory as it is now."""
        started = time.perf_counter()
        try:
            read_fd, write_fd = os.pipe()
        except OSError as e:  # out of file descriptors: this process does the work itself
            return self._refused(e, started)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            pid = os.fork()
        except OSError as e:  # out of memory or processes (a container's pids limit)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(read_fd)
            os.close(write_fd)
            return self._refused(e, started)
        if pid == 0:  # the child: never returns into the caller's code
            _run_child(work, read_fd, write_fd, blocked, self.timeout_s)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(write_fd)
        return Forked(pid, read_fd, started, self.timeout_s, self.reports)

    def _refused(self, error: OSError, started: float) -> Forked[T]:
        log.warning("no planning child (%s); this process plans alone", error)
        self.reports.append(AheadReport(time.perf_counter() - started, None, f"not started: {error}"))
        return Forked(None, -1, started, self.timeout_s, self.reports)


def fork_offload() -> ForkOffload | None:
    """An offload when this process can fork safely and has a whole CPU to spare, else None."""
    why = _why_one_cpu()
    if why is not None:
        log.debug("planning on one CPU: %s", why)
        return None
    return ForkOffload()


def _why_one_cpu() -> str | None:
    if not hasattr(os, "fork"):
        return "no fork() here"
    if threading.active_count() > 1:
        return f"{threading.active_count()} threads"
    if available_cpus(whole=True) < 2:
        return "less than two whole CPUs available"
    return None


@dataclass(slots=True)
class Forked(Generic[T]):
    """A child's answer to come: :meth:`result` waits for it (None: no usable answer), :meth:`cancel`
    kills the child. Either reaps it and closes its pipe; calling both, or either twice, is harmless.
    Made by :meth:`ForkOffload.start` (no child: pid None, pipe -1)."""

    _pid: int | None
    _fd: int
    _started: float
    _timeout_s: float
    _reports: list[AheadReport]

    @property
    def pid(self) -> int | None:
        """The child's process id while it is not reaped."""
        return self._pid

    def result(self) -> T | None:
        """The child's answer. Waits at most until the child's deadline, and at most :data:`GRACE_S` or
        three times as long as the caller took since the fork, whichever is longer: the child has a
        part of about the caller's size, so by then computing it here is quicker than waiting on."""
        if self._pid is None:
            return None
        now = time.perf_counter()
        deadline = min(self._started + self._timeout_s, now + max(GRACE_S, 3 * (now - self._started)))
        try:
            return self._answer(deadline)
        except Exception as e:  # whatever went wrong, this process plans the part itself
            self._end(kill=True)
            self._failed(f"{type(e).__name__}: {e}")
            return None

    def cancel(self) -> None:
        if self._pid is not None:
            self._end(kill=True)
            self._report(None, "cancelled")

    def _answer(self, deadline: float) -> T | None:
        chunks: list[bytes] = []
        why = self._read(chunks, deadline)
        code = self._end(kill=why is not None)
        if why is None and code != 0:
            why = f"exit status {code}"
        if why is not None:
            self._failed(why)
            return None
        ok, value, private_mb = pickle.loads(b"".join(chunks))
        if not ok:
            self._failed(f"failed in the child: {value}")
            return None
        self._report(private_mb, "answered")
        answer: T = value
        return answer

    def _read(self, chunks: list[bytes], deadline: float) -> str | None:
        """The child's whole answer into ``chunks``; why not (None: read to the end)."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return "timed out"
            if not poller.poll(math.ceil(left * 1000)):
                continue
            chunk = os.read(self._fd, _CHUNK)
            if not chunk:
                return None
            chunks.append(chunk)

    def _end(self, *, kill: bool) -> int:
        """Close the pipe, kill the child if asked, reap it; its exit code."""
        pid = self._pid
        assert pid is not None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): its status is lost
            status = -1
        self._pid = None
        return os.waitstatus_to_exitcode(status) if status >= 0 else -1

    def _failed(self, why: str) -> None:
        self._report(None, why)
        log.warning("the planning child gave no usable answer (%s); this process plans its part itself", why)

    def _report(self, private_mb: float | None, outcome: str) -> None:
        self._reports.append(AheadReport(time.perf_counter() - self._started, private_mb, outcome))


def _run_child(
    work: Callable[[], object], read_fd: int, write_fd: int, mask: set[int | signal.Signals], timeout_s: float
) -> None:
    code = 70
    try:
        os.close(read_fd)
        for number in (*_BLOCKED, signal.SIGALRM):
            signal.signal(number, signal.SIG_DFL)
        signal.alarm(math.ceil(timeout_s) + 1)  # ends it even when nobody waits any more
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            answer = pickle.dumps((True, work(), _private_mb()), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # the cause goes to the parent, which plans this part itself
            answer = pickle.dumps((False, f"{type(e).__name__}: {e}", None))
        data = memoryview(answer)
        while data:
            data = data[os.write(write_fd, data) :]
        code = 0
    finally:
        os._exit(code)


def _private_mb() -> float | None:
    """This process's private resident memory (Linux smaps_rollup), in MB."""
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return None
    kb = sum(
        int(line.split()[1]) for line in text.splitlines() if line.startswith(("Private_Clean:", "Private_Dirty:"))
    )
    return kb / 1024
