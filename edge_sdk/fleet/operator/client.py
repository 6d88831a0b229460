"""The operator's side of the fleet protocol over one `MqttClient`.

`FleetOperator` keeps a registry of devices from the retained `edge/+/state` (presence),
`edge/+/reported` and `edge/+/desired` topics, sends commands and waits for their responses by
correlation id, publishes desired state (retained), and answers a device's `need_chunks` with the
chunks of inline artifacts read from a local folder (chunk_sender.py reads and publishes them).

MQTT handlers run on paho's network thread: they only decode, record and wake waiters; every
blocking call (`request`, `deploy`, `publish_desired`) runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from edge_sdk.core.errors import ChunkSendError, CommandTimeoutError
from edge_sdk.fleet.operator.chunk_sender import missing_chunks, send_chunks
from edge_sdk.fleet.wire.manifest import DeploymentManifest, DeviceIdentity, decode_manifest
from edge_sdk.fleet.wire.protocol import (
    REFUSED,
    DesiredState,
    Presence,
    ProtocolError,
    ReportedState,
    Response,
    decode_desired,
    decode_presence,
    decode_reported,
    decode_response,
    encode_message,
    new_command,
)
from edge_sdk.mqtt import AckTimeoutError, Message, MqttClient
from edge_sdk.mqtt.topics import DeviceTopics

T = TypeVar("T")
log = logging.getLogger(__name__)

ALL = DeviceTopics("+")
DEFAULT_TIMEOUT_S = 30.0
MAX_CHUNK_ROUNDS = 8


@dataclass(frozen=True)
class DeviceRecord:
    """What the operator knows about one device from its retained topics."""

    device: str
    presence: Presence | None = None
    reported: ReportedState | None = None
    desired: DesiredState | None = None
    desired_payload: bytes | None = None

    @property
    def online(self) -> bool:
        return self.presence is not None and self.presence.online

    @property
    def profile(self) -> str | None:
        return self.presence.profile if self.presence is not None else None

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.presence.labels) if self.presence is not None else {}

    @property
    def active_version(self) -> int | None:
        if self.presence is not None and self.presence.active_version is not None:
            return self.presence.active_version
        return self.reported.active_version if self.reported is not None else None

    @property
    def identity(self) -> DeviceIdentity:
        return DeviceIdentity(device_id=self.device, profile=self.profile or "", labels=self.labels)


DeviceListener = Callable[[DeviceRecord, str], None]
"""Called with the updated record and what changed ("state", "reported" or "desired"), on paho's thread."""


@dataclass
class _Pending:
    device: str
    event: threading.Event = field(default_factory=threading.Event)
    response: Response | None = None


def manifest_of(envelope: bytes) -> DeploymentManifest:
    """The manifest inside a signed envelope, *without* checking the signature (devices do that)."""
    try:
        inner = json.loads(envelope)["manifest"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"expected a signed manifest envelope, could not read it ({exc})") from None
    if not isinstance(inner, str):
        raise ProtocolError("expected a signed manifest envelope whose 'manifest' is a string")
    return decode_manifest(inner.encode("utf-8"))


class FleetOperator:
    """Registry, commands, desired state and chunk sending for an operator connected with `client`.

    Call `start()` after the client is connected; `close()` unsubscribes (the client stays the caller's).
    """

    def __init__(self, client: MqttClient, chunk_rounds: int = MAX_CHUNK_ROUNDS):
        self.client = client
        self.chunk_rounds = chunk_rounds
        self._lock = threading.Condition()
        self._devices: dict[str, DeviceRecord] = {}
        self._pending: dict[str, _Pending] = {}
        self._listeners: list[DeviceListener] = []
        self._last_update = time.monotonic()
        self.ignored_messages = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> FleetOperator:
        self.client.subscribe(ALL.resp, self._on_response, qos=1)
        self.client.subscribe(ALL.state, self._on_state, qos=1)
        self.client.subscribe(ALL.reported, self._on_reported, qos=1)
        self.client.subscribe(ALL.desired, self._on_desired, qos=1)
        return self

    def close(self) -> None:
        for topic in (ALL.resp, ALL.state, ALL.reported, ALL.desired):
            self.client.unsubscribe(topic)
        with self._lock:
            for pending in self._pending.values():
                pending.event.set()

    def __enter__(self) -> FleetOperator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add_listener(self, listener: DeviceListener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    # ---------------------------------------------------------------- registry
    def devices(self) -> list[DeviceRecord]:
        """Every device seen on a retained topic, sorted by id."""
        with self._lock:
            return [self._devices[name] for name in sorted(self._devices)]

    def device(self, device: str) -> DeviceRecord:
        with self._lock:
            return self._devices.get(device) or DeviceRecord(device)

    def settle(self, quiet_s: float = 0.5, timeout: float = 10.0) -> list[DeviceRecord]:
        """Wait until no registry message has come for `quiet_s` (retained messages arrive right after subscribing)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                now = time.monotonic()
                quiet_until = self._last_update + quiet_s
                if now >= quiet_until or now >= deadline:
                    break
                self._lock.wait(min(quiet_until, deadline) - now)
        return self.devices()

    def wait_for(self, predicate: Callable[[DeviceRecord], bool], device: str, timeout: float) -> bool:
        """Block until `predicate(record of device)` holds; False after `timeout` seconds."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self._devices.get(device) or DeviceRecord(device)), timeout)

    # ---------------------------------------------------------------- commands
    def request(
        self, device: str, name: str, args: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> Response:
        """Send a command (QoS 1, v5 response topic + correlation id) and wait for its response.

        Raises CommandTimeoutError when none comes within `timeout` seconds.
        """
        topics = DeviceTopics(device)
        command = new_command(name, args)
        pending = _Pending(device)
        with self._lock:
            self._pending[command.id] = pending
        deadline = time.monotonic() + timeout
        try:
            # paho keeps a QoS 1 message until the broker has it (also across a reconnect): a slow
            # acknowledgement is no reason to stop waiting for the answer.
            with contextlib.suppress(AckTimeoutError):
                self.client.publish(
                    topics.cmd,
                    encode_message(command),
                    qos=1,
                    wait=min(timeout, self.client.settings.publish_timeout_s),
                    response_topic=topics.resp,
                    correlation_data=command.id.encode("ascii"),
                )
            if not pending.event.wait(max(0.0, deadline - time.monotonic())) or pending.response is None:
                raise CommandTimeoutError(f"device '{device}' did not answer '{name}' within {timeout:g} s")
            return pending.response
        finally:
            with self._lock:
                self._pending.pop(command.id, None)

    def deploy(
        self,
        device: str,
        envelope: bytes,
        artifacts_dir: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> Response:
        """Send `deploy` with the signed envelope; answer `need_chunks` with chunks and ask again.

        Returns the final response (active, or the device's error). Raises CommandTimeoutError, and
        ChunkSendError when the device needs chunks the operator cannot read from `artifacts_dir`.
        """
        args = {"manifest": envelope.decode("utf-8")}
        manifest: DeploymentManifest | None = None
        for _ in range(self.chunk_rounds + 1):
            response = self.request(device, "deploy", args, timeout)
            missing = missing_chunks(response)
            if missing is None:
                return response
            if manifest is None:
                manifest = manifest_of(envelope)
            if artifacts_dir is None:
                raise ChunkSendError(
                    f"device '{device}' needs chunks of {', '.join(sorted(missing))}; give the folder holding the artifacts"
                )
            send_chunks(self.client, device, manifest, missing, artifacts_dir)
        raise ChunkSendError(
            f"device '{device}' still needs chunks after {self.chunk_rounds} rounds of sending them; giving up"
        )

    # ---------------------------------------------------------------- desired state
    def publish_desired(
        self, device: str, deployment: bytes | None, pipelines: Iterable[str] | None = None
    ) -> DesiredState:
        """Publish (retained) a new desired state for `device` with a revision above any seen."""
        record = self.device(device)
        known = record.desired.revision if record.desired is not None else 0
        revision = max(known + 1, time.time_ns() // 1000)
        if pipelines is None:
            pipelines = record.desired.pipelines if record.desired is not None else []
        desired = DesiredState(
            revision=revision,
            deployment=deployment.decode("utf-8") if deployment is not None else None,
            pipelines=list(pipelines),
        )
        self.publish_desired_payload(device, encode_message(desired))
        return desired

    def publish_desired_payload(self, device: str, payload: bytes) -> None:
        """Publish raw desired-state bytes (e.g. the previous desired state, restored), retained."""
        self.client.publish(DeviceTopics(device).desired, payload, qos=1, retain=True)
        try:
            desired = decode_desired(payload)
        except ProtocolError:
            return
        self._update(device, "desired", desired=desired, desired_payload=payload)

    # ---------------------------------------------------------------- handlers (paho's thread)
    def _on_response(self, message: Message) -> None:
        try:
            response = decode_response(message.payload)
        except ProtocolError as exc:
            self._ignore(message, exc)
            return
        key = message.correlation_data.decode("ascii", "replace") if message.correlation_data else response.id
        with self._lock:
            pending = self._pending.get(key) or self._pending.get(response.id)
            if pending is None or pending.device != _device_of(message.topic):
                return  # another operator's command, or one we stopped waiting for
            pending.response = response
            pending.event.set()

    def _decoded(self, message: Message, kind: str, decode: Callable[[bytes], T]) -> T | None:
        """A retained state message decoded; None once a cleared one (empty payload) is forgotten or a
        malformed one ignored."""
        if not message.payload:
            self._forget(message.topic, kind)
            return None
        try:
            return decode(message.payload)
        except ProtocolError as exc:
            self._ignore(message, exc)
            return None

    def _on_state(self, message: Message) -> None:
        if (presence := self._decoded(message, "presence", decode_presence)) is None:
            return
        device = _device_of(message.topic)
        known = self.device(device).presence
        if not presence.online and presence.profile is None and known is not None:
            presence = known.model_copy(update={"online": False})  # the last will: keep the last known facts
        self._update(device, "state", presence=presence)

    def remember(self, facts: Iterable[Presence]) -> None:
        """Last known facts of devices seen in earlier runs, for devices whose retained state is only the will."""
        for presence in facts:
            known = self.device(presence.device).presence
            if known is None or (not known.online and known.profile is None):
                online = known.online if known is not None else False
                self._update(presence.device, "state", presence=presence.model_copy(update={"online": online}))

    def _on_reported(self, message: Message) -> None:
        if (reported := self._decoded(message, "reported", decode_reported)) is None:
            return
        self._update(_device_of(message.topic), "reported", reported=reported)

    def _on_desired(self, message: Message) -> None:
        if (desired := self._decoded(message, "desired", decode_desired)) is None:
            return
        device = _device_of(message.topic)
        current = self.device(device).desired
        if current is not None and current.revision > desired.revision:
            return  # our own newer publish was recorded before the broker echoed an older one
        self._update(device, "desired", desired=desired, desired_payload=message.payload)

    def _update(self, device: str, kind: str, **changes: Any) -> None:
        with self._lock:
            old = self._devices.get(device) or DeviceRecord(device)
            record = DeviceRecord(**{**old.__dict__, **changes})
            self._devices[device] = record
            self._last_update = time.monotonic()
            listeners = list(self._listeners)
            self._lock.notify_all()
        for listener in listeners:
            try:
                listener(record, kind)
            except Exception:  # a listener's bug must not stop the registry
                log.exception("fleet device listener failed")

    def _forget(self, topic: str, what: str) -> None:
        device = _device_of(topic)
        if what == "presence":
            self._update(device, "state", presence=None)
        elif what == "reported":
            self._update(device, "reported", reported=None)
        else:
            self._update(device, "desired", desired=None, desired_payload=None)

    def _ignore(self, message: Message, exc: Exception) -> None:
        self.ignored_messages += 1
        log.warning("ignored a malformed message on %s: %s", message.topic, exc)


def _device_of(topic: str) -> str:
    parts = topic.split("/")
    return parts[1] if len(parts) > 2 else ""


def is_refusal(response: Response) -> bool:
    return not response.ok and response.error is not None and response.error.reason == REFUSED
