"""Messages between stage processes over Unix stream sockets in the abstract namespace.

Why not multiprocessing.Queue: its reader and writer locks are semaphores, so a stage SIGKILLed
inside get() or put() leaves them held and the queue is dead for everyone. Here each sender has a
connection of its own, so a sender's death ends only its own connection (a half-sent message is
discarded with it), and a receiver's death is an error the senders see at once and answer by
connecting again. The listening socket can belong to the parent and be handed to each incarnation
of the receiving stage, so senders always find someone listening across a restart.

Abstract socket names (a leading NUL) leave nothing in the file system. Anyone on the host may
connect to one, so the listener accepts only processes of its own user (SO_PEERCRED) before it
unpickles anything.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

_HEADER = struct.Struct("!Q")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_RECV_BYTES = 1 << 20
_PEERCRED = struct.Struct("3i")


def abstract_address(name: str) -> str:
    return "\0" + name


def listening_socket(address: str, backlog: int = 64) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen(backlog)
    return sock


class MessageListener:
    """The receiving end: any number of senders, whole messages only, never blocks past `timeout`."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setblocking(False)
        self._buffers: dict[socket.socket, bytearray] = {}
        self.refused = 0
        """Connections refused: another user's process, or a message over the size limit."""

    def receive(self, timeout: float) -> list[Any]:
        """The messages that arrived within `timeout` seconds (returns as soon as there are some)."""
        deadline = time.monotonic() + timeout
        messages: list[Any] = []
        while True:
            left = max(0.0, deadline - time.monotonic())
            try:
                readable, _, _ = select.select([self.sock, *self._buffers], [], [], left)
            except InterruptedError:
                readable = []
            for sock in readable:
                if sock is self.sock:
                    self._accept()
                else:
                    messages += self._read(sock)
            if messages or time.monotonic() >= deadline:
                return messages

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        _pid, uid, _gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        if uid != os.getuid():
            self.refused += 1
            conn.close()
            return
        conn.setblocking(False)
        self._buffers[conn] = bytearray()

    def _read(self, conn: socket.socket) -> list[Any]:
        buffer = self._buffers[conn]
        try:
            chunk = conn.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            chunk = b""
        if not chunk:  # the sender is gone; a message it had not finished goes with it
            self._drop(conn)
            return []
        buffer += chunk
        messages = []
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if size > MAX_MESSAGE_BYTES:
                self.refused += 1
                self._drop(conn)
                break
            if len(buffer) < _HEADER.size + size:
                break
            messages.append(pickle.loads(bytes(buffer[_HEADER.size : _HEADER.size + size])))
            del buffer[: _HEADER.size + size]
        return messages

    def _drop(self, conn: socket.socket) -> None:
        self._buffers.pop(conn, None)
        conn.close()

    def close(self) -> None:
        for conn in list(self._buffers):
            self._drop(conn)
        self.sock.close()


class MessageSender:
    """The sending end: connects on first use and again after the receiver went away.

    `send` blocks while the receiver is alive but not reading (back-pressure); it retries on a
    broken connection until the message is through or `give_up()` says so.
    """

    def __init__(self, address: str, give_up: Callable[[], bool], retry_seconds: float = 0.01):
        self.address = address
        self.give_up = give_up
        self.retry_seconds = retry_seconds
        self._sock: socket.socket | None = None

    def send(self, message: Any) -> bool:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        while True:
            try:
                sock = self._connected()
                sock.sendall(_HEADER.pack(len(payload)))
                sock.sendall(payload)
                return True
            except OSError:
                self.close()
                if self.give_up():
                    return False
                time.sleep(self.retry_seconds)

    def _connected(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.address)
            except OSError:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
