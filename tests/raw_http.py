"""A bare HTTP/1.1 server on 127.0.0.1 for tests that script the bytes a client meets (chunked streams that
end or stall at chosen moments), as the API server streams a watch."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked answer."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def accept_each(server: socket.socket, stop: threading.Event, handle: Callable[[socket.socket], None]) -> None:
    """Each connection ``server`` accepts, handled on a thread of its own (as an API server serves them),
    until ``stop`` is set (then the server may be closed at once)."""
    server.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        except OSError:  # the server socket closed under accept() by a test that has set ``stop``
            if stop.is_set():
                return
            raise
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


@contextlib.contextmanager
def serving(handle: Callable[[socket.socket], None], scheme: str = "http") -> Iterator[str]:
    """A server on 127.0.0.1 handing each connection to ``handle`` (:func:`accept_each`) while the block runs;
    yields its base URL."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    threading.Thread(target=accept_each, args=(server, stop, handle), daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
