"""Free TCP ports for the test world's servers (API servers, etcd, the operator's endpoints).

A module of its own, below everything that starts a server, so none of them imports another
for it.
"""

from __future__ import annotations

import socket
import threading

__all__ = ["free_port"]

#: Every port handed out by this process: the kernel gives a port that was just closed again
#: soon (within about a hundred binds here), and two servers given the same one clash.
_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


def free_port() -> int:
    """A TCP port no socket listens on, on any address.

    Bound on the wildcard address, not loopback: the operator's probe server listens on every
    address, and in the sealed world the fake GitHub and others listen on the node's bridge
    address (10.88.0.1), so a port free on 127.0.0.1 alone can still be taken (seen once in a
    full run: "Address already in use" at the operator's start). Never the same port twice in one
    run: an operator's metrics and probe ports came out equal once, and it could not start.
    """
    while True:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port: int = sock.getsockname()[1]
        with _LOCK:
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
