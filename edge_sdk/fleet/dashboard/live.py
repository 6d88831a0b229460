"""What the dashboard shows of each device, kept current from MQTT, and the change sequence the live feed
reads.

The registry (presence, reported and desired state) is the `FleetOperator`'s; this adds the devices'
telemetry (`edge/+/telemetry/#`): pipeline stats, pipeline status events and preview thumbnails. Every
device is untrusted input: its telemetry is rate-limited per device (a token bucket; what overflows is
dropped and counted), decoded strictly (what fails is dropped and counted), and bounded (the last
`EVENTS_PER_DEVICE` events, one thumbnail per pipeline and source, at most `MAX_DEVICES` devices).

Each change bumps a global sequence number and stamps the device with it, so a live feed asks for the
devices changed since the number it last saw (`changes_since`): a burst of updates to one device costs
the page one row update.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge_sdk.fleet.operator.client import DeviceRecord, FleetOperator
from edge_sdk.fleet.wire.manifest import DeviceIdentity, TargetSelector
from edge_sdk.fleet.wire.protocol import ProtocolError
from edge_sdk.fleet.wire.telemetry import (
    MAX_PREVIEW_BYTES,
    PIPELINES,
    PREVIEW,
    STATS,
    PipelineEvent,
    PipelineStats,
    decode_event,
    decode_stats,
)
from edge_sdk.mqtt import Message, MqttClient

log = logging.getLogger(__name__)

TELEMETRY_FILTER = "edge/+/telemetry/#"
EVENTS_PER_DEVICE = 50
MAX_DEVICES = 20_000
JPEG_START = b"\xff\xd8"


@dataclass(frozen=True)
class TelemetryLimits:
    """How much telemetry one device may send: `per_second` sustained, `burst` at once."""

    per_second: float = 10.0
    burst: float = 40.0


@dataclass
class _Bucket:
    tokens: float
    at: float

    def take(self, limits: TelemetryLimits, now: float) -> bool:
        self.tokens = min(limits.burst, self.tokens + (now - self.at) * limits.per_second)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass
class _Telemetry:
    bucket: _Bucket
    stats: dict[str, PipelineStats] = field(default_factory=dict)
    events: deque[PipelineEvent] = field(default_factory=lambda: deque(maxlen=EVENTS_PER_DEVICE))
    previews: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    """'pipeline/source' -> (JPEG, the sequence number it came with)."""
    last_seen: float | None = None
    rate_limited: int = 0
    malformed: int = 0


class FleetView:
    """The devices as the pages show them; thread-safe (MQTT handlers write, the web server reads)."""

    def __init__(
        self,
        operator: FleetOperator,
        client: MqttClient,
        limits: TelemetryLimits | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.operator = operator
        self.client = client
        self.limits = limits or TelemetryLimits()
        self._clock = clock
        self._lock = threading.Lock()
        self._seq = 0
        self._stamps: dict[str, int] = {}
        self._telemetry: dict[str, _Telemetry] = {}
        self.malformed = 0
        self.rate_limited = 0
        self.ignored_devices = 0
        self._remove_listener: Callable[[], None] | None = None

    def start(self) -> FleetView:
        self._remove_listener = self.operator.add_listener(self._on_record)
        for record in self.operator.devices():
            self._touch(record.device)
        self.client.subscribe(TELEMETRY_FILTER, self._on_telemetry, qos=0)
        return self

    def close(self) -> None:
        self.client.unsubscribe(TELEMETRY_FILTER)
        if self._remove_listener is not None:
            self._remove_listener()

    # ---------------------------------------------------------------- reading
    @property
    def seq(self) -> int:
        with self._lock:
            return self._seq

    def stamp_of(self, device: str) -> int:
        """The sequence number of the device's last change (0: never seen)."""
        with self._lock:
            return self._stamps.get(device, 0)

    def changes_since(self, seq: int, selector: TargetSelector | None = None) -> tuple[int, list[dict[str, Any]]]:
        """(the current sequence number, the views of the devices changed after `seq` that `selector` keeps)."""
        with self._lock:
            now = self._seq
            changed = sorted(device for device, stamp in self._stamps.items() if stamp > seq)
        views = [self.device_view(device) for device in changed]
        return now, [view for view in views if _selected(view, selector)]

    def device_view(self, device: str) -> dict[str, Any]:
        """One row of the devices page (JSON)."""
        record = self.operator.device(device)
        with self._lock:
            telemetry = self._telemetry.get(device)
            stamp = self._stamps.get(device, 0)
            stats = dict(telemetry.stats) if telemetry else {}
            previews = {key: seq for key, (_jpeg, seq) in telemetry.previews.items()} if telemetry else {}
            last_telemetry = telemetry.last_seen if telemetry else None
            counters = (telemetry.rate_limited, telemetry.malformed) if telemetry else (0, 0)
        presence = record.presence
        seen = [t for t in (presence.since.timestamp() if presence and presence.since else None, last_telemetry) if t]
        running = set(record.reported.pipelines) if record.reported else set()
        names = sorted({*(presence.pipelines if presence else []), *running, *stats})
        return {
            "id": device,
            "seq": stamp,
            "online": record.online,
            "profile": record.profile,
            "labels": record.labels,
            "version": record.active_version,
            "health": presence.health if presence else None,
            "sdk": presence.sdk_version if presence else None,
            "last_seen": max(seen) if seen else None,
            "pipelines": [_pipeline_view(name, name in running, stats.get(name)) for name in names],
            "previews": previews,
            "rate_limited": counters[0],
            "malformed": counters[1],
        }

    def device_detail(self, device: str) -> dict[str, Any]:
        """The device page: its row, reported and desired state, and its recent pipeline events."""
        record = self.operator.device(device)
        with self._lock:
            telemetry = self._telemetry.get(device)
            events = [event.model_dump() for event in telemetry.events] if telemetry else []
        desired = record.desired
        return {
            **self.device_view(device),
            "reported": record.reported.model_dump(mode="json") if record.reported else None,
            "desired": {
                "revision": desired.revision,
                "pipelines": desired.pipelines,
                "deployment": "signed manifest" if desired.deployment else None,
            }
            if desired
            else None,
            "events": events,
        }

    def preview(self, device: str, key: str) -> bytes | None:
        with self._lock:
            telemetry = self._telemetry.get(device)
            found = telemetry.previews.get(key) if telemetry else None
        return found[0] if found else None

    def known(self, device: str) -> bool:
        with self._lock:
            return device in self._stamps

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {
                "devices": len(self._stamps),
                "malformed": self.malformed,
                "rate_limited": self.rate_limited,
                "ignored_devices": self.ignored_devices,
                "registry_malformed": self.operator.ignored_messages,
            }

    # ---------------------------------------------------------------- writing (paho's thread)
    def _on_record(self, record: DeviceRecord, _kind: str) -> None:
        self._touch(record.device)

    def _touch(self, device: str) -> None:
        with self._lock:
            self._stamp(device)

    def _stamp(self, device: str) -> None:
        """The device changed: the next sequence number is its stamp (the caller holds the lock)."""
        self._seq += 1
        self._stamps[device] = self._seq

    def _on_telemetry(self, message: Message) -> None:
        parts = message.topic.split("/")
        if len(parts) < 4:
            return
        device, kind, rest = parts[1], parts[3], parts[4:]
        now = self._clock()
        with self._lock:
            telemetry = self._telemetry.get(device)
            if telemetry is None:
                if len(self._telemetry) >= MAX_DEVICES:
                    self.ignored_devices += 1
                    return
                telemetry = self._telemetry[device] = _Telemetry(_Bucket(self.limits.burst, now))
            if not telemetry.bucket.take(self.limits, now):
                telemetry.rate_limited += 1
                self.rate_limited += 1
                return
            accepted = self._record(telemetry, device, kind, rest, message.payload, self._seq + 1)
            if accepted is None:
                return  # telemetry the dashboard does not show (results-outbox, offload probes...)
            if not accepted:
                telemetry.malformed += 1
                self.malformed += 1
                return
            telemetry.last_seen = now
            self._stamp(device)

    def _record(
        self, telemetry: _Telemetry, device: str, kind: str, rest: list[str], payload: bytes, seq: int
    ) -> bool | None:
        """Store one telemetry message, which will be the device's change `seq`: True when taken, False when
        malformed, None when not shown here."""
        try:
            if kind == STATS and len(rest) == 1:
                stats = decode_stats(payload)
                if stats.device != device or stats.pipeline != rest[0]:
                    return False
                telemetry.stats[stats.pipeline] = stats
                return True
            if kind == PIPELINES and len(rest) == 1:
                event = decode_event(payload)
                if event.device != device or event.pipeline != rest[0]:
                    return False
                telemetry.events.append(event)
                return True
        except ProtocolError as exc:
            log.debug("dashboard: malformed telemetry from %s: %s", device, exc)
            return False
        if kind == PREVIEW and len(rest) == 2:
            if not payload.startswith(JPEG_START) or len(payload) > MAX_PREVIEW_BYTES:
                return False
            telemetry.previews["/".join(rest)] = (payload, seq)
            return True
        return None


def _pipeline_view(name: str, running: bool, stats: PipelineStats | None) -> dict[str, Any]:
    view: dict[str, Any] = {"name": name, "running": running}
    if stats is not None:
        view.update(
            fps=stats.fps,
            p50=stats.latency_p50_ms,
            p99=stats.latency_p99_ms,
            frames=stats.frames,
            dropped=stats.dropped,
            at=stats.at,
        )
    return view


def _selected(view: dict[str, Any], selector: TargetSelector | None) -> bool:
    if selector is None:
        return True
    identity = DeviceIdentity(device_id=view["id"], profile=view["profile"] or "", labels=view["labels"])
    return selector.mismatch(identity) is None
