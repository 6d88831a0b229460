"""Where the preview listens: binding a host and port the way its server does, a free port, the URL a
browser opens, and why an address cannot be used, as one line that says what to do."""

from __future__ import annotations

import errno
import socket

from edge_sdk.core.errors import SinkError

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound as the preview's server binds (SO_REUSEADDR), or the SinkError saying why not."""
    probe = socket.socket(address_family(host), socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        probe.close()
        raise SinkError(listen_problem(host, port, exc)) from None
    return probe


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at `host` now."""
    probe = bound_socket(host, 0)
    try:
        port: int = probe.getsockname()[1]
        return port
    finally:
        probe.close()


def address_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def page_url(host: str, port: int) -> str:
    """The page's address; a wildcard host (0.0.0.0) is reached on this machine's loopback."""
    if host in WILDCARD_HOSTS:
        host = "::1" if ":" in host else "127.0.0.1"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def listen_problem(host: str, port: int, exc: OSError) -> str:
    """Why the preview cannot listen on host:port, as one line that says what to do."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"preview sink: {where} is already in use (another program or preview listens there); "
            "stop it, or give the preview sink another port (port: 0 picks a free one)"
        )
    if exc.errno == errno.EACCES:
        return f"preview sink: no permission to listen on {where}; ports below 1024 need root, choose port >= 1024"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (
            f"preview sink: {host} is not an address of this host; "
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        )
    return f"preview sink: cannot listen on {where}: {exc.strerror or exc}"
