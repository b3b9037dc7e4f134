"""Free TCP ports on the loopback for the servers tests start."""

from __future__ import annotations

import socket
import threading

_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A loopback port free now and never handed out before in this process: the kernel may give a port
    just released again, so two calls in a row (a webhook port and a metrics port, say) could otherwise
    return the same one."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        with _lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
