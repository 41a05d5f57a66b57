"""Free TCP ports on loopback, for simulated hosts and the servers tests and benchmarks start."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on now (held while chosen).

    Picked bind-then-close: another process may take one before its user binds it, so a
    caller that starts a server on it should be ready to try again on a new port.
    """
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """One TCP port on 127.0.0.1 that nothing listens on now (see `free_ports`)."""
    return free_ports(1)[0]
