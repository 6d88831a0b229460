"""`SpoolingPublisher`: which way a publish goes when the client has a disk spool, and the replay of the spool.

Two modes. *Live*: connected and nothing spooled, so publish() hands messages straight to paho.
*Spooling*: disconnected, or the spool still holds messages, so publish() appends to the spool;
no live message can overtake a spooled one. On (re)connect a replay thread hands the spooled
messages to paho in id order, in a bounded window, and removes each one only after its PUBACK
(PUBCOMP for QoS 2; QoS 0 messages are replayed at QoS 1 so that they too are acknowledged). When
every row has been handed over it switches to live under the lock that appends take, so nothing
published in between is missed.

Order across a reconnect: paho keeps unacknowledged messages in its own ordered queue and resends
them after a reconnect. Before handing over new rows after each (re)connect, the replay waits until
everything handed to paho earlier is acknowledged, so the resends always come first. A row whose
PUBACK was lost to a crash is sent again after the restart: duplicates only as QoS 1 allows.

Locks: `_cond` is never held while calling paho; paho's thread only takes it briefly (connection
up/down). Lock order: `_cond`, then the spool's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from paho.mqtt.reasoncodes import ReasonCode

from edge_sdk.mqtt.acks import AckBook
from edge_sdk.mqtt.spool import DiskSpool, SpooledMessage

log = logging.getLogger(__name__)

POLL_S = 0.2
"""Longest wait of the replay thread before it looks again (acknowledgements wake it sooner)."""

SendSpooled = Callable[[SpooledMessage], "int | None"]
"""Hand one spooled message to paho; its message id, or None when paho cannot take it now."""


class SpoolingPublisher:
    def __init__(self, spool: DiskSpool, send: SendSpooled, acks: AckBook[ReasonCode], window: int = 100):
        if window < 1:
            raise ValueError(f"expected a replay window >= 1, got {window}")
        self.spool = spool
        self._send = send
        self._acks = acks
        self._window = window
        self._cond = threading.Condition()
        self._live = False
        self._connected = False
        self._generation = 0
        """Counts connections; the replay re-checks paho's older messages whenever it changes."""
        self._closing = False
        self._pending: dict[int, int] = {}
        """paho message id -> spool row id, for rows handed over and not yet acknowledged."""
        self._last_handed = 0
        self.replayed = 0
        """Spooled messages the broker acknowledged (and that were then removed from the spool)."""
        self._thread = threading.Thread(target=self._run, name=f"mqtt-spool:{spool.path.name}", daemon=True)
        self._thread.start()

    @property
    def live(self) -> bool:
        with self._cond:
            return self._live

    # --- publishers' threads -----------------------------------------------------------------------

    def admit(self, message: SpooledMessage) -> bool:
        """Spool `message` unless the outbox is live (or closed); True when it was spooled (the caller must not send it)."""
        with self._cond:
            if self._live or self._closing:
                return False
            self._append(message)
            return True

    def spool_now(self, message: SpooledMessage) -> bool:
        """Spool `message` whatever the mode (paho just refused it: no connection, or its queue is full).

        Later publishes are spooled too until the replay has caught up, so they keep their order. False when closed.
        """
        with self._cond:
            if self._closing:
                return False
            self._live = False
            self._append(message)
            return True

    def wait_drained(self, timeout: float) -> bool:
        """Wait until the spool is replayed and acknowledged and the outbox is live; False after `timeout` s."""
        with self._cond:
            return self._cond.wait_for(lambda: self._live and not self._pending, timeout)

    def close(self) -> None:
        """Stop the replay; what is not acknowledged stays in the spool for the next start."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    # --- paho's thread -----------------------------------------------------------------------------

    def connection_up(self) -> None:
        with self._cond:
            self._connected = True
            self._generation += 1
            if not self._live and not self._pending and len(self.spool) == 0:
                self._live = True  # nothing to replay: go live at once
            self._cond.notify_all()

    def connection_down(self) -> None:
        with self._cond:
            self._connected = False
            self._live = False
            self._cond.notify_all()

    # --- the replay thread -------------------------------------------------------------------------

    def _append(self, message: SpooledMessage) -> None:
        self.spool.append(message)
        self._cond.notify_all()

    def _has_work(self) -> bool:
        return self._closing or (self._connected and (not self._live or bool(self._pending)))

    def _run(self) -> None:
        checked = 0  # the connection whose older messages in paho are known to be acknowledged
        failing = False
        while True:
            with self._cond:
                self._cond.wait_for(self._has_work)
                if self._closing:
                    return
                generation, live = self._generation, self._live
            try:
                checked = self._step(generation, live, checked)
                failing = False
            except Exception:  # e.g. the disk; the rows stay in the spool, so try again shortly
                if not failing:
                    log.exception("MQTT spool %s: the replay failed; retrying", self.spool.path)
                failing = True
                with self._cond:
                    self._cond.wait(1.0)

    def _step(self, generation: int, live: bool, checked: int) -> int:
        """One round of the replay; returns the connection generation now known to be safe to hand rows to."""
        if generation != checked:
            if self._pending:
                self._collect(POLL_S)
                return checked
            if not self._acks.wait_until_settled(POLL_S):
                return checked
            checked = generation
        progressed = False if live else self._hand_over(generation)
        if self._pending:
            self._collect(0.0 if progressed else POLL_S)
        elif not progressed and not live:
            with self._cond:
                self._cond.wait(POLL_S)
        return checked

    def _hand_over(self, generation: int) -> bool:
        """Hand the next rows to paho, within the window; True when some were handed over."""
        room = self._window - len(self._pending)
        if room <= 0:
            return False
        rows = self.spool.read_after(self._last_handed, room)
        if not rows:
            with self._cond:
                current = self._connected and self._generation == generation
                if current and not self.spool.read_after(self._last_handed, 1):
                    self._live = True
                    self._cond.notify_all()
            return False
        handed = False
        for row in rows:
            try:
                mid = self._send(row)
            except Exception:  # a message paho refuses outright would block the replay for ever
                log.exception("MQTT spool %s: dropping message %d to %r", self.spool.path, row.id, row.topic)
                self.spool.remove([row.id])
                self._last_handed = row.id
                continue
            if mid is None:
                break
            with self._cond:
                self._pending[mid] = row.id
                self._last_handed = row.id
            handed = True
        return handed

    def _collect(self, timeout: float) -> None:
        """Remove the rows whose acknowledgement arrived (waiting up to `timeout` s for one)."""
        arrived = self._acks.collect(list(self._pending), timeout)
        if not arrived:
            return
        rows = [self._pending[mid] for mid in arrived]
        refused = [reason for reason in arrived.values() if reason.is_failure]
        self.spool.remove(rows)
        with self._cond:
            for mid in arrived:
                del self._pending[mid]
            self.replayed += len(rows) - len(refused)
            self._cond.notify_all()
        if refused:
            log.warning(
                "MQTT spool %s: the broker refused %d replayed message(s) (%s); they are dropped",
                self.spool.path,
                len(refused),
                refused[0],
            )
