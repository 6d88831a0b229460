"""A stand-in for systemd's notify socket: an AF_UNIX datagram socket that records every sd_notify message.

with NotifySocket.bind(tmp_path / "notify.sock") as notify:
    env = {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "2000000"}
    ...
    notify.wait_for(lambda messages: ["READY=1"] in messages, 60, "READY=1")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


class NotifySocket:
    def __init__(self, sock: socket.socket, address: str):
        self.address = address
        """What $NOTIFY_SOCKET holds: a path, or '@name' for an abstract socket."""
        self._socket = sock
        self._socket.settimeout(0.1)
        self._lock = threading.Lock()
        self.messages: list[list[str]] = []
        """Each datagram's lines, in arrival order."""
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="notify-socket", daemon=True)
        self._thread.start()

    @classmethod
    def bind(cls, path: Path) -> NotifySocket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        return cls(sock, str(path))

    @classmethod
    def bind_abstract(cls, name: str) -> NotifySocket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(b"\0" + name.encode())
        return cls(sock, "@" + name)

    def snapshot(self) -> list[list[str]]:
        with self._lock:
            return list(self.messages)

    def count(self, line: str) -> int:
        return sum(line in message for message in self.snapshot())

    def wait_for(self, condition: Callable[[list[list[str]]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self.snapshot()):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; got {self.snapshot()}")

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._socket.close()

    def __enter__(self) -> NotifySocket:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._socket.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.messages.append(data.decode("utf-8", errors="replace").split("\n"))
