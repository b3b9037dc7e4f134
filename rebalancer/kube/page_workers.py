"""Pod pages decoded and converted in worker processes while this process goes on listing.

A 150,000-pod list is 1.35 GB of JSON. Decoding and converting it narrowly is about 3.5 s of CPU
that holds the GIL, so in one interpreter the list cannot take less, whatever the cores. Here pages
go to worker processes as they are free (:mod:`split_list`); each decodes and converts its pages
exactly as the in-process path does (the same narrow decoder, conversion and errors naming the pod
and the field) and sends the pods back as rows over shared tables (:mod:`pod_rows`), from which this
process builds the same frozen ``Pod`` structs for about a tenth of the cost of converting the page.
Pages travel in shared memory (two memfd slots per worker; a bigger page through the pipe).

The trip costs CPU (about half a conversion more per page, in total), so workers pay only with CPUs
to spare; :func:`auto_workers` uses one on two CPUs (see there for the figures).

A worker is ``python -c`` importing this module with this process's ``sys.path``, talking over two
pipes; it imports only the decoders (not the ``kubernetes`` client) and starts in about 0.3 s, in the
background while nodes and ReplicaSets are listed (:meth:`PageWorkers.warm_up`). Workers live for the
life of the process and serve one list at a time; a list that finds them busy (another thread
listing) decodes in-process. A page that fails to decode comes back as the same
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
import mmap
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
from typing import Any

import msgspec

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import decode
from rebalancer.kube.bodies import decode_body
from rebalancer.kube.pod_rows import PodRows, RowReader, RowWriter
from rebalancer.machine import available_cpus
from rebalancer.model import Pod

MAX_AUTO_WORKERS = 2
"""Worker processes used by default (fewer when fewer CPUs are available to this process)."""
PAGES_AHEAD = 2
"""Pages a worker may hold at once: one it converts, one waiting in its other slot."""
SLOT_BYTES = 32 << 20
"""Size of a worker's shared-memory page slots: only the bytes a page fills are ever touched; a bigger
page (500 pods of 64 KB) goes through the pipe instead."""
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
    """The next message is a page's raw body (a page too big for a slot, or no slots on this system)."""


class PageInSlot(msgspec.Struct, tag="slot", array_like=True):
    """A page's raw body is in the worker's shared-memory slot ``slot``, ``size`` bytes long."""

    slot: int
    size: int


_JOB = msgspec.msgpack.Decoder(Setup | PageFollows | PageInSlot)
_ROWS = msgspec.msgpack.Decoder(PodRows)
_ENCODER = msgspec.msgpack.Encoder()
_PAGE_FOLLOWS = _ENCODER.encode(PageFollows())
_READY = b"ready"  # a worker's first frame


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
    """Reads frames straight into a buffer (no intermediate copies): by default one reused buffer, so
    that a frame read is valid until the next :meth:`read`."""

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


def serve(jobs: FrameReader, results: int, slots: Sequence[mmap.mmap]) -> None:
    """A worker's loop: a Setup starts a list, each page is answered with its PodRows; EOF ends it.

    Pages come in shared memory (``slots``, written by the parent, which reuses a slot only after
    reading the answer to the page in it), so a job message is a few bytes and the parent's write
    never waits for a conversion to end; a page too big for a slot comes through the pipe.
    """
    gc.disable()  # decoded JSON forms no cycles, and a worker holds one page at a time
    views = [memoryview(slot) for slot in slots]
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
                continue
            if isinstance(job, PageInSlot):
                raw = views[job.slot][: job.size]
            if convert is None or raw is None:  # never expected: this module's own side sends a Setup first
                raise RuntimeError("a page arrived before its list's setup")
            write_frame(results, convert(raw))
            del raw


def _converter(job: Setup, pod_list: msgspec.json.Decoder[Any]) -> Callable[[memoryview], bytearray]:
    """A page's raw body -> its encoded :class:`PodRows` (the conversion error, if any, inside)."""
    out = bytearray()
    writer = RowWriter()

    def convert(raw: memoryview) -> bytearray:
        try:
            pods = decode.converted(decode_body(job, pod_list, raw).items)
        except KubeUnavailable as exc:
            _ENCODER.encode_into(PodRows(error=str(exc), status=exc.status, reason=exc.reason), out)
        else:
            _ENCODER.encode_into(writer.page(pods), out)
        return out

    return convert


def _main() -> None:
    # Ctrl-C reaches the whole process group: the parent decides, and a worker ends when its pipe does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job_fd, result_fd, slot_bytes, *slot_fds = (int(n) for n in sys.argv[1].split(","))
    slots = [mmap.mmap(fd, slot_bytes) for fd in slot_fds]
    try:
        write_frame(result_fd, _READY)  # imported and listening: pages may come
        serve(FrameReader(job_fd), result_fd, slots)
    except BrokenPipeError:  # the parent went away mid-answer: nothing to tell anyone
        pass


# --- this process's side ------------------------------------------------------------------------


def auto_workers() -> int:
    """Worker processes for big pod lists by default: none on one CPU, else one per CPU beyond the first
    (up to :data:`MAX_AUTO_WORKERS`).

    A page handed to a worker costs about 1.5 times the CPU of converting it here (the copy, the rows,
    the second process), so a worker only pays with a CPU that would otherwise idle. On two CPUs the
    listing thread leaves the second one mostly idle. Measured on the two-CPU benchmark machine (the
    test API server sharing both CPUs), 150,000 pods, alternating runs: the snapshot alone 1.87 s with
    one worker against 2.37 s without (medians of 5), the whole CronJob cycle 3.27 s against 3.56 s
    (medians of 9); two workers there were slower than one (their listing 2.20 s against 2.04 s). An
    earlier session, under heavy load from other jobs, found one worker as often slower as faster
    (3.2-7.1 s against 3.7-6.8 s).
    """
    return max(0, min(MAX_AUTO_WORKERS, available_cpus() - 1))


class WorkerFailed(KubeUnavailable):
    """A page worker died, could not be started or answered nonsense (the list fails; the next one
    starts new workers)."""


def _slot_files(size: int) -> list[int]:
    """Anonymous shared-memory files for a worker's page slots; none where Linux's memfd is missing."""
    if not hasattr(os, "memfd_create"):
        return []
    fds: list[int] = []
    try:
        for _ in range(PAGES_AHEAD):
            fds.append(os.memfd_create("rebalancer-page"))
            os.ftruncate(fds[-1], size)  # sparse: pages are allocated when written
    except OSError:
        for fd in fds:
            os.close(fd)
        return []
    return fds


class _Worker:
    """One worker process, this side's ends of its pipes and its shared-memory page slots."""

    def __init__(self) -> None:
        job_reader, job_writer = os.pipe()
        result_reader, result_writer = os.pipe()
        for fd in (job_writer, result_writer):
            with contextlib.suppress(OSError, AttributeError):  # Linux only; the default size works too
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self.slot_bytes = SLOT_BYTES
        slot_fds = _slot_files(self.slot_bytes)
        theirs = (job_reader, result_writer, *slot_fds)
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOT,
                    ",".join(map(str, (job_reader, result_writer, self.slot_bytes, *slot_fds))),
                    *sys.path,
                ],
                pass_fds=theirs,
                stdin=subprocess.DEVNULL,
            )
            self.slots = [mmap.mmap(fd, self.slot_bytes) for fd in slot_fds]
        except OSError:
            for fd in (*theirs, job_writer, result_reader):
                os.close(fd)
            raise
        for fd in theirs:  # the worker's: closed here, so that each side sees the other go (a map stays)
            os.close(fd)
        self.jobs = job_writer
        self.results = FrameReader(result_reader)
        self.ready = False  # it said so (it has imported what it needs)
        self.rows = RowReader()  # the tables of the list it is set up for
        self.setup: Setup | None = None  # the list it is set up for
        self.pages: deque[_Page] = deque()  # the pages it has been sent and not answered yet

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
        for slot in self.slots:
            slot.close()

    def free_slot(self, size: int) -> int | None:
        """A slot that no page in flight is using, if the page fits one."""
        if size > self.slot_bytes:
            return None
        used = {page.slot for page in self.pages}
        return next((i for i in range(len(self.slots)) if i not in used), None)


# The worker imports exactly what this process would, from the same sys.path.
_BOOT = "import sys; sys.path[:] = sys.argv[2:]; from rebalancer.kube.page_workers import _main; _main()"


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
    """A page offered to a worker (in shared-memory slot ``slot``, or None), and its pods once converted."""

    slot: int | None
    pods: list[Pod] | None = None


class Session:
    """One list's use of the workers, a :class:`~rebalancer.kube.split_list.PageSink` (all its
    methods run on the fetching thread). A worker takes up to :data:`PAGES_AHEAD` pages at a time."""

    def __init__(self, setup: Setup, workers: Sequence[_Worker]) -> None:
        self._setup = setup
        self._encoded_setup = _ENCODER.encode(setup)
        self._workers = workers
        self._offered: deque[_Page] = deque()

    def idle(self) -> bool:
        return not self._offered

    def offer(self, raw: bytes) -> bool:
        """A worker takes the page if it has a free slot for it; a page too big for a slot goes
        through the pipe, and only to an idle worker (which reads it at once: the write never waits
        on a worker that waits for its answer to be read)."""
        size = len(raw)
        free = [
            w
            for w in self._workers
            if self._is_ready(w) and len(w.pages) < PAGES_AHEAD and (w.free_slot(size) is not None or not w.pages)
        ]
        if not free:
            return False
        worker = min(free, key=lambda w: len(w.pages))
        if worker.setup is not self._setup:
            worker.send(self._setup.what, self._encoded_setup)
            worker.setup, worker.rows = self._setup, RowReader()
        slot = worker.free_slot(size)
        if slot is None:
            worker.send(self._setup.what, _PAGE_FOLLOWS)
            worker.send(self._setup.what, raw)
        else:
            worker.slots[slot][:size] = raw
            worker.send(self._setup.what, _ENCODER.encode(PageInSlot(slot, size)))
        page = _Page(slot)
        worker.pages.append(page)
        self._offered.append(page)
        return True

    def done(self, wait: bool) -> list[Sequence[Pod]]:
        for worker in self._workers:
            while worker.pages and (wait or worker.answered()):
                worker.pages[0].pods = self._converted(worker, worker.receive(self._setup.what))
                worker.pages.popleft()
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

    def _converted(self, worker: _Worker, answer: memoryview) -> list[Pod]:
        try:
            page = _ROWS.decode(answer)
            if page.error is None:
                return worker.rows.page(page)
        except (msgspec.DecodeError, ValueError) as exc:  # never expected: this module's own worker answered
            raise WorkerFailed(f"list {self._setup.what}: a page worker answered nonsense: {exc}") from exc
        raise KubeUnavailable(page.error, status=page.status, reason=page.reason)


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
