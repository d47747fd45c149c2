"""A free TCP port on 127.0.0.1 for a server a test starts (real engines, the fault server, a plan's port),
and whether a port is closed again once a run stopped its server."""

from __future__ import annotations

import socket

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_closed(port: int) -> bool:
    """Nothing answers on 127.0.0.1:``port`` (a connection is refused)."""
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        return False
    except httpx.ConnectError:
        return True
