"""sd_notify(3) without libsystemd: tell systemd a service is ready, alive, stopping, or what it does.

    notifier = SystemdNotifier.from_environment()   # reads $NOTIFY_SOCKET, $WATCHDOG_USEC, $WATCHDOG_PID
    notifier.ready()                                 # READY=1 once the service does its job
    while running:
        notifier.watchdog_if_due()                   # WATCHDOG=1 at most every half watchdog interval
    notifier.stopping()                              # STOPPING=1 when it begins to stop

Each call sends one datagram on an AF_UNIX SOCK_DGRAM socket to `$NOTIFY_SOCKET` (a path, or an
abstract-namespace name written with a leading '@'). Without `$NOTIFY_SOCKET` (not started by
systemd with `Type=notify`) every call is a no-op. A failure to send is logged once and never raised:
a service must not fail because its supervisor cannot be told. The watchdog interval is
`$WATCHDOG_USEC` microseconds, and only when `$WATCHDOG_PID` is unset or names this process (a child
that inherited the environment must not ping for its parent). The module-level `ready()`,
`watchdog()`, `stopping()` and `status(text)` use a notifier made from the environment on first use.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class SystemdNotifier:
    """Sends sd_notify messages to one socket (see the module docstring); thread-safe."""

    def __init__(
        self,
        address: str | None,
        watchdog_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.address = address or None
        """The socket as $NOTIFY_SOCKET gives it ('@name' for the abstract namespace); None: no-op."""
        self.watchdog_seconds = watchdog_seconds if address else None
        """systemd's watchdog timeout (WatchdogSec=); None when it expects no pings."""
        self._clock = clock
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._warned = False
        self._last_ping: float | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SystemdNotifier:
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET"), watchdog_interval(env))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def ping_interval(self) -> float | None:
        """How often to send WATCHDOG=1: half of systemd's timeout, as sd_watchdog_enabled(3) advises."""
        return None if self.watchdog_seconds is None else self.watchdog_seconds / 2

    # -- the messages -------------------------------------------------------------------------------

    def ready(self, status: str | None = None) -> bool:
        """READY=1 (with a STATUS= line when given): start-up is over; also counts as a watchdog ping."""
        sent = self.notify("READY=1", *([f"STATUS={status}"] if status else []))
        if sent:
            self._last_ping = self._clock()
        return sent

    def watchdog(self) -> bool:
        """WATCHDOG=1 now."""
        sent = self.notify("WATCHDOG=1")
        if sent:
            self._last_ping = self._clock()
        return sent

    def watchdog_if_due(self) -> bool:
        """WATCHDOG=1 when half the watchdog interval has passed since the last ping (cheap to call in a loop)."""
        interval = self.ping_interval
        if interval is None:
            return False
        last = self._last_ping
        if last is not None and self._clock() - last < interval:
            return False
        return self.watchdog()

    def stopping(self, status: str | None = None) -> bool:
        """STOPPING=1: the service begins to stop (systemd then waits up to TimeoutStopSec=)."""
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        """STATUS=text, shown by `systemctl status` (one line: newlines become spaces)."""
        return self.notify("STATUS=" + " ".join(text.splitlines()))

    def notify(self, *lines: str) -> bool:
        """Send `lines` as one datagram; True when sent, False when disabled or it failed (logged once)."""
        if self.address is None or not lines:
            return False
        payload = "\n".join(lines).encode("utf-8", errors="replace")
        try:
            with self._lock:
                if self._socket is None:
                    self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._socket.sendto(payload, socket_address(self.address))
        except (OSError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                log.warning("cannot notify systemd on %s (%s); further failures are not logged", self.address, exc)
            return False
        return True

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


def socket_address(address: str) -> str | bytes:
    """$NOTIFY_SOCKET as `sendto` takes it: '@name' is the abstract name b'\\0name'."""
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """systemd's watchdog timeout in seconds for this process, or None (sd_watchdog_enabled(3)'s rules)."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = environ.get("WATCHDOG_PID", "")
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1_000_000


_default: SystemdNotifier | None = None
_default_lock = threading.Lock()


def default_notifier() -> SystemdNotifier:
    """The notifier of this process's environment, made on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SystemdNotifier.from_environment()
        return _default


def ready(status: str | None = None) -> bool:
    return default_notifier().ready(status)


def watchdog() -> bool:
    return default_notifier().watchdog()


def stopping(status: str | None = None) -> bool:
    return default_notifier().stopping(status)


def status(text: str) -> bool:
    return default_notifier().status(text)
