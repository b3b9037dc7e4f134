"""Pod pages decoded and converted in worker processes while this process goes on listing.

A 150,000-pod list is 1.35 GB of JSON. Decoding and converting it narrowly is about 2.5 s of CPU
that holds the GIL, so in one interpreter the list cannot take less, whatever the cores. Here whole
pages go to a few worker processes in turn; each decodes and converts its pages exactly as the
in-process path does (the same narrow decoder, conversion and errors naming the pod and the field)
and sends the pods back as MessagePack, which this process decodes in C into the same frozen
``Pod`` structs, about a tenth of the cost of the JSON path. Results are read back in the order the
pages were sent, so the pods keep the server's order.

A worker is a plain ``python -m rebalancer.kube.page_workers`` with this process's ``sys.path``,
talking over two pipes; it imports only the decoders (not the ``kubernetes`` client) and starts in
about 0.3 s, in the background while nodes and ReplicaSets are listed (:meth:`PageWorkers.warm_up`).
Workers live for the life of the process and serve one list at a time; a list that finds them busy
(another thread listing) decodes in-process. A page that fails to decode comes back as the same
:class:`KubeUnavailable` it would raise in-process. A worker that dies or answers nonsense fails the
list with a :class:`WorkerFailed` naming the cause; after any failed list the workers are stopped,
and the next list starts fresh ones. A worker ends when its job pipe closes, so one whose parent
died (even by SIGKILL) ends too.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import math
import os
import select
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import decode
from rebalancer.kube.bodies import decode_body
from rebalancer.model import Pod

MAX_AUTO_WORKERS = 2
"""Worker processes used by default (fewer when fewer CPUs are available to this process)."""
STOP_SECONDS = 2.0
_PIPE_BYTES = 1 << 20  # Linux pipes hold 64 KiB by default: a 4.5 MB page would take 70 round trips


# --- messages ---------------------------------------------------------------------------------


class Setup(msgspec.Struct, tag="setup", array_like=True):
    """What a worker needs to convert one list's pods (sent to each worker before its first page)."""

    what: str  # "pods": the collection, in error messages
    kind: str  # "pod": one object, in error messages
    annotations: list[str]  # the annotation keys kept
    owners: list[tuple[str, str, str, str]]  # (namespace, ReplicaSet, controller kind, controller name)


class PageFollows(msgspec.Struct, tag="page", array_like=True):
    """The next message is a page's raw body."""


class Converted(msgspec.Struct, array_like=True, gc=False):
    """A page's pods, or the error that stopped its conversion (``pods`` then empty)."""

    pods: list[Pod] = []
    error: str | None = None
    status: int | None = None
    reason: str | None = None


_JOB = msgspec.msgpack.Decoder(Setup | PageFollows)
_CONVERTED = msgspec.msgpack.Decoder(Converted)
_ENCODER = msgspec.msgpack.Encoder()
_PAGE_FOLLOWS = _ENCODER.encode(PageFollows())
_READY = b"ready"  # a worker's first frame


def _plain_mapping(obj: Any) -> Any:
    """The domain types share read-only mappings (``MappingProxyType``); MessagePack sends them as maps."""
    if isinstance(obj, MappingProxyType):
        return dict(obj)
    raise NotImplementedError(f"cannot send a {type(obj).__name__} from a page worker")


_POD_ENCODER = msgspec.msgpack.Encoder(enc_hook=_plain_mapping)


def pods_setup(annotations: frozenset[str], owners: Mapping[tuple[str, str], tuple[str, str]]) -> Setup:
    return Setup("pods", "pod", sorted(annotations), [(ns, rs, k, n) for (ns, rs), (k, n) in owners.items()])


# --- frames over a pipe -------------------------------------------------------------------------

_HEADER = 8  # bytes of a frame's length, little-endian


def write_frame(fd: int, payload: bytes | bytearray | memoryview) -> None:
    """One message: its length, then its bytes (``os.write`` until all is written)."""
    _write_all(fd, memoryview(len(payload).to_bytes(_HEADER, "little")))
    _write_all(fd, memoryview(payload))


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """Reads frames into one reusable buffer: a page is 4.5 MB, and a fresh buffer for each costs
    more in page faults than the copy itself. A frame read is valid until the next :meth:`read`."""

    def __init__(self, fd: int) -> None:
        self._file = open(fd, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self._buffer = bytearray(1 << 16)

    def read(self) -> memoryview:
        """The next frame; EOFError when the pipe is closed (between frames or mid-way)."""
        size = int.from_bytes(self._fill(_HEADER), "little")
        return self._fill(size)

    def _fill(self, size: int) -> memoryview:
        if size > len(self._buffer):
            self._buffer = bytearray(size + size // 4)  # a new one: views of the old may still exist
        view = memoryview(self._buffer)[:size]
        done = 0
        while done < size:
            got = self._file.readinto(view[done:])
            if not got:
                raise EOFError("the pipe closed")
            done += got
        return view

    def fileno(self) -> int:
        return self._file.fileno()

    def close(self) -> None:
        self._file.close()


# --- the worker process ---------------------------------------------------------------------


def serve(jobs: FrameReader, results: int) -> None:
    """A worker's loop: a Setup starts a list, each page is answered with its Converted; EOF ends it."""
    gc.disable()  # decoded JSON forms no cycles, and a worker holds one page at a time
    with ExitStack() as current:
        convert: Callable[[memoryview], bytearray] | None = None
        while True:
            try:
                job = _JOB.decode(jobs.read())
                raw = jobs.read() if isinstance(job, PageFollows) else None
            except EOFError:
                return
            if isinstance(job, Setup):
                current.close()
                owners = {(ns, rs): (k, n) for ns, rs, k, n in job.owners}
                pod_list = current.enter_context(
                    decode.PodDecoder(frozenset(job.annotations), owners).converting_list()
                )
                convert = _converter(job, pod_list)
            elif raw is not None:
                if convert is None:  # never expected: this module's own side sends a Setup first
                    raise RuntimeError("a page arrived before its list's setup")
                write_frame(results, convert(raw))


def _converter(job: Setup, pod_list: msgspec.json.Decoder[Any]) -> Callable[[memoryview], bytearray]:
    """A page's raw body -> its encoded :class:`Converted` (the conversion error, if any, inside)."""
    out = bytearray()

    def convert(raw: memoryview) -> bytearray:
        try:
            pods = decode.converted(decode_body(job, pod_list, raw).items)
        except KubeUnavailable as exc:
            _ENCODER.encode_into(Converted(error=str(exc), status=exc.status, reason=exc.reason), out)
        else:
            _POD_ENCODER.encode_into(Converted(pods), out)
        return out

    return convert


def _main() -> None:
    # Ctrl-C reaches the whole process group: the parent decides, and a worker ends when its pipe does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job_fd, result_fd = (int(fd) for fd in sys.argv[1:3])
    try:
        write_frame(result_fd, _READY)  # imported and listening: pages may come
        serve(FrameReader(job_fd), result_fd)
    except BrokenPipeError:  # the parent went away mid-answer: nothing to tell anyone
        pass


# --- this process's side ------------------------------------------------------------------------


def available_cpus() -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a container's limit)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota == "max":
            return count
        return max(1, min(count, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        return count


def auto_workers() -> int:
    """Worker processes for big pod lists by default: none on a single CPU (they would only add work)."""
    cpus = available_cpus()
    return 0 if cpus < 2 else min(MAX_AUTO_WORKERS, cpus)


class WorkerFailed(KubeUnavailable):
    """A page worker died, could not be started or answered nonsense (the list fails; the next one
    starts new workers)."""


class _Worker:
    """One worker process and this side's ends of its pipes."""

    def __init__(self) -> None:
        job_reader, job_writer = os.pipe()
        result_reader, result_writer = os.pipe()
        for fd in (job_writer, result_writer):
            with contextlib.suppress(OSError, AttributeError):  # Linux only; the default size works too
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(job_reader), str(result_writer), *sys.path],
                pass_fds=(job_reader, result_writer),
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            for fd in (job_reader, job_writer, result_reader, result_writer):
                os.close(fd)
            raise
        os.close(job_reader)  # the worker's ends: closed here, so that each side sees the other go
        os.close(result_writer)
        self.jobs = job_writer
        self.results = FrameReader(result_reader)
        self.ready = False  # it said so (it has imported what it needs)
        self.setup: Setup | None = None  # the list it is set up for
        self.page: _Page | None = None  # the page it is converting

    def answered(self) -> bool:
        """Whether a frame is waiting to be read (never blocks)."""
        readable, _, _ = select.select([self.results.fileno()], [], [], 0)
        return bool(readable)

    def send(self, what: str, message: bytes) -> None:
        try:
            write_frame(self.jobs, message)
        except OSError as exc:
            raise WorkerFailed(f"list {what}: {self.gone()}") from exc

    def receive(self, what: str) -> memoryview:
        try:
            return self.results.read()
        except (EOFError, OSError) as exc:
            raise WorkerFailed(f"list {what}: {self.gone()}") from exc

    def gone(self) -> str:
        try:
            code: int | None = self.process.wait(0.5)
        except subprocess.TimeoutExpired:
            code = None
        state = "stopped answering" if code is None else f"exited with code {code}"
        return f"a page worker process (pid {self.process.pid}) {state}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.jobs)
        self.results.close()


# The worker imports exactly what this process would, from the same sys.path.
_BOOT = "import sys; sys.path[:] = sys.argv[3:]; from rebalancer.kube.page_workers import _main; _main()"


class PageWorkers:
    """``count`` worker processes, started on first use; one list at a time uses them (:meth:`session`)."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        self.count = count
        self._workers: list[_Worker] = []
        self._busy = threading.Lock()
        self._starting = threading.Lock()

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def warm_up(self) -> None:
        """Start the workers now if they are not running (they import while the caller goes on)."""
        with contextlib.suppress(WorkerFailed):  # reported by the list that needs them
            self._running()

    @contextlib.contextmanager
    def session(self, setup: Setup) -> Iterator[Session | None]:
        """The workers for one list; None when another list is using them.

        Leaving the block on an error stops the workers (pages may still be in flight)."""
        if not self._busy.acquire(blocking=False):
            yield None
            return
        try:
            session = Session(setup, self._running())
            yield session
            if not session.idle():
                raise RuntimeError("a page worker session ended with pages in flight")
        except BaseException:
            self.stop()
            raise
        finally:
            self._busy.release()

    def stop(self) -> None:
        """Stop the workers: closing their job pipes ends them; one that hangs is killed."""
        with self._starting:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()
        for worker in workers:
            try:
                worker.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(STOP_SECONDS)

    def _running(self) -> list[_Worker]:
        with self._starting:
            if len(self._workers) == self.count and all(w.process.poll() is None for w in self._workers):
                return self._workers
        self.stop()
        with self._starting:
            try:
                while len(self._workers) < self.count:
                    self._workers.append(_Worker())
            except OSError as exc:
                raise WorkerFailed(f"cannot start page worker processes: {exc}") from exc
            return self._workers


@dataclass
class _Page:
    """A page offered to a worker, and its pods once converted."""

    pods: list[Pod] | None = None


class Session:
    """One list's use of the workers, a :class:`~rebalancer.kube.split_list.PageSink` (all its
    methods run on the fetching thread). A worker takes one page at a time."""

    def __init__(self, setup: Setup, workers: Sequence[_Worker]) -> None:
        self._setup = setup
        self._encoded_setup = _ENCODER.encode(setup)
        self._workers = workers
        self._offered: deque[_Page] = deque()

    def idle(self) -> bool:
        return not self._offered

    def offer(self, raw: bytes) -> bool:
        for worker in self._workers:
            if worker.page is None and self._is_ready(worker):
                if worker.setup is not self._setup:
                    worker.send(self._setup.what, self._encoded_setup)
                    worker.setup = self._setup
                worker.send(self._setup.what, _PAGE_FOLLOWS)
                worker.send(self._setup.what, raw)
                worker.page = _Page()
                self._offered.append(worker.page)
                return True
        return False

    def done(self, wait: bool) -> list[Sequence[Pod]]:
        for worker in self._workers:
            if worker.page is not None and (wait or worker.answered()):
                worker.page.pods = self._converted(worker.receive(self._setup.what))
                worker.page = None
        out: list[Sequence[Pod]] = []
        while self._offered and self._offered[0].pods is not None:
            out.append(self._offered.popleft().pods)  # type: ignore[arg-type]
        return out

    def abort(self) -> None:
        for worker in self._workers:
            if worker.process.poll() is None:
                worker.process.kill()

    def _is_ready(self, worker: _Worker) -> bool:
        if not worker.ready and worker.answered():
            if bytes(worker.receive(self._setup.what)) != _READY:  # never expected
                raise WorkerFailed(f"list {self._setup.what}: a page worker did not start properly")
            worker.ready = True
        return worker.ready

    def _converted(self, answer: memoryview) -> list[Pod]:
        try:
            converted = _CONVERTED.decode(answer)
        except msgspec.DecodeError as exc:  # never expected: this module's own worker answered
            raise WorkerFailed(f"list {self._setup.what}: a page worker answered nonsense: {exc}") from exc
        if converted.error is not None:
            raise KubeUnavailable(converted.error, status=converted.status, reason=converted.reason)
        return converted.pods


_SHARED: dict[int, PageWorkers] = {}
_SHARED_LOCK = threading.Lock()


def shared(count: int) -> PageWorkers:
    """The process-wide workers for ``count`` processes (started on first use, stopped at exit)."""
    with _SHARED_LOCK:
        found = _SHARED.get(count)
        if found is None:
            found = _SHARED[count] = PageWorkers(count)
        return found


@atexit.register
def _stop_shared() -> None:
    for workers in list(_SHARED.values()):
        workers.stop()


if __name__ == "__main__":
    _main()
