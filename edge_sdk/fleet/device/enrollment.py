"""Enrollment on the box: trade the shipped claim certificate for this box's own device certificate.

The box makes its key pair (EC P-256, written 0600 where agent.yaml's `broker.tls.key_file` points; it
never leaves the box) and a CSR whose common name is agent.yaml's `device_id`, connects with the claim
certificate, publishes an `EnrollmentRequest` and waits for the answer. It accepts a certificate only
when the answer echoes its request id and nonce, the certificate's public key is its own, the certificate
was issued by the fleet CA it trusts (`broker.tls.ca_file`), names its device id, is a client (not a CA)
certificate and is valid now. It then writes it where `broker.tls.cert_file` points, so the agent starts
with it unchanged. Progress is kept in `enrollment.json` for `edge-sdk device status`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import ValidationError

from edge_sdk import __version__
from edge_sdk.core.errors import BrokerError, ConfigError, EdgeSDKError
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.wire.enrollment import (
    EnrollmentFacts,
    EnrollmentRequest,
    EnrollmentResponse,
    check_claim_name,
    check_device_name,
    decode_enrollment_response,
    encode_enrollment,
    new_token,
    request_topic,
    response_topic,
)
from edge_sdk.fleet.wire.protocol import ProtocolError, utc_now
from edge_sdk.mqtt import ConnectionEvent, ConnectionState, MqttClient, MqttSettings, ReconnectPolicy, TlsSettings
from edge_sdk.mqtt.messages import Message

log = logging.getLogger(__name__)

DEFAULT_STATE_FILE = Path("/var/lib/edge-sdk/enrollment.json")
SERIAL_SOURCES = (Path("/sys/firmware/devicetree/base/serial-number"), Path("/etc/machine-id"))

State = Literal["enrolled", "waiting", "retrying", "refused", "not_started"]


class EnrollmentRefusedError(EdgeSDKError):
    """The operator refused the request, or its answer failed a check."""


@dataclass(frozen=True)
class EnrollmentOptions:
    claim_cert: Path
    claim_key: Path
    serial: str
    state_file: Path = DEFAULT_STATE_FILE
    response_timeout_s: float = 30.0
    min_backoff_s: float = 2.0
    max_backoff_s: float = 300.0


@dataclass
class EnrollmentStatus:
    state: State = "not_started"
    device_id: str | None = None
    attempts: int = 0
    last_error: str | None = None
    next_retry_at: str | None = None
    updated_at: str | None = None

    def write(self, path: Path) -> None:
        self.updated_at = utc_now().isoformat()
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        temporary.write_text(json.dumps(self.__dict__, indent=2) + "\n")
        temporary.replace(path)


def read_status(path: Path) -> dict[str, Any]:
    """enrollment.json as written by the box ({"state": "not_started"} when there is none)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"state": "not_started"}
    return data if isinstance(data, dict) else {"state": "not_started"}


def read_serial(sources: tuple[Path, ...] = SERIAL_SOURCES) -> str:
    """The box's serial: the device tree's serial-number (ARM boards), else /etc/machine-id."""
    for source in sources:
        try:
            text = source.read_bytes().rstrip(b"\x00\n ").decode("ascii", "replace").strip()
        except OSError:
            continue
        if text:
            return text
    raise ConfigError(f"no serial number found in {', '.join(map(str, sources))}: give --serial")


def load_or_create_key(path: Path, group_of: Path | None = None) -> ec.EllipticCurvePrivateKey:
    """The box's private key: read it when it exists, else make one and write it 0600 (never sent anywhere).

    Run as root (`sudo edge-sdk device enroll`), the key gets the group of `group_of` (the claim key, which
    `device provision` gives the agent's group) and mode 0640, so the agent's user can read it."""
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"{path}: expected an EC private key, got {type(key).__name__}")
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(pem)
    os.chmod(temporary, 0o600)
    if os.geteuid() == 0 and group_of is not None and group_of.exists() and group_of.stat().st_gid != 0:
        os.chown(temporary, 0, group_of.stat().st_gid)
        os.chmod(temporary, 0o640)
    temporary.replace(path)
    return key


def make_csr(key: ec.EllipticCurvePrivateKey, device_id: str) -> str:
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, device_id)]))
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def _public_bytes(key: Any) -> bytes:
    return bytes(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def check_response(
    response: EnrollmentResponse,
    request: EnrollmentRequest,
    key: ec.EllipticCurvePrivateKey,
    device_id: str,
    ca: x509.Certificate,
    now: datetime.datetime | None = None,
) -> x509.Certificate:
    """The certificate of an approved answer, after every check; EnrollmentRefusedError otherwise."""
    if response.request_id != request.request_id or response.nonce != request.nonce:
        raise EnrollmentRefusedError("the answer is for another request (request id or nonce differ): a replay?")
    if response.status != "approved":
        raise EnrollmentRefusedError(f"enrollment {response.status}: {response.reason or 'no reason given'}")
    if response.certificate_pem is None:
        raise EnrollmentRefusedError("an approved answer without a certificate")
    try:
        certificate = x509.load_pem_x509_certificate(response.certificate_pem.encode())
        chain = [x509.load_pem_x509_certificate(pem.encode()) for pem in response.chain_pem]
    except ValueError as exc:
        raise EnrollmentRefusedError(f"the certificate cannot be read: {exc}") from None
    if _public_bytes(certificate.public_key()) != _public_bytes(key.public_key()):
        raise EnrollmentRefusedError("the certificate is for another key than this box's")
    path = [certificate, *chain]
    try:
        for child, parent in zip(path, [*path[1:], ca], strict=True):
            child.verify_directly_issued_by(parent)
    except (ValueError, TypeError) as exc:
        raise EnrollmentRefusedError(f"the certificate was not issued by the fleet CA this box trusts: {exc}") from None
    except Exception as exc:  # cryptography's InvalidSignature
        raise EnrollmentRefusedError(
            f"the certificate was not issued by the fleet CA this box trusts ({type(exc).__name__})"
        ) from None
    names = [attribute.value for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [device_id] or response.device_id != device_id:
        raise EnrollmentRefusedError(f"expected a certificate for {device_id!r}, got one for {names}")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    for link in [*path, ca]:
        if not link.not_valid_before_utc <= now <= link.not_valid_after_utc:
            raise EnrollmentRefusedError(
                f"a certificate is not valid now ({link.not_valid_before_utc} to {link.not_valid_after_utc})"
            )
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound as exc:
        raise EnrollmentRefusedError(f"the certificate lacks an extension: {exc}") from None
    if constraints.ca or ExtendedKeyUsageOID.CLIENT_AUTH not in usage:
        raise EnrollmentRefusedError("expected a client certificate that is not a CA")
    return certificate


@dataclass
class Enroller:
    """One box's enrollment: `attempt()` once, or `run()` until enrolled (backoff between attempts)."""

    config: AgentConfig
    options: EnrollmentOptions
    sleep: Callable[[float], bool] = field(default=lambda seconds: not threading.Event().wait(seconds))
    status: EnrollmentStatus = field(default_factory=EnrollmentStatus)

    def __post_init__(self) -> None:
        tls = self.config.broker.tls
        if tls is None or tls.ca_file is None or tls.cert_file is None or tls.key_file is None:
            raise ConfigError("agent.yaml: broker.tls needs ca_file, cert_file and key_file to enroll")
        self.ca_file, self.cert_file, self.key_file = tls.ca_file, tls.cert_file, tls.key_file
        self.device_id = check_device_name(self.config.device_id)
        self.claim = check_claim_name(_common_name(self.options.claim_cert))
        self.key = load_or_create_key(self.key_file, group_of=self.options.claim_key)
        self.request = EnrollmentRequest(
            request_id=new_token(),
            nonce=new_token(),
            csr_pem=make_csr(self.key, self.device_id),
            facts=_facts(self.options.serial, self.config),
        )
        self.status.device_id = self.device_id

    def claim_settings(self) -> MqttSettings:
        broker = self.config.broker
        assert broker.tls is not None
        tls = TlsSettings.model_validate(
            {**broker.tls.model_dump(), "cert_file": self.options.claim_cert, "key_file": self.options.claim_key}
        )
        # no reconnection within an attempt: a box whose connection was taken over by another box of its batch
        # would take it back at once, and the batch would keep closing each other's connections (see attempt)
        no_reconnect = ReconnectPolicy(min_delay_s=3600, max_delay_s=3600)
        return broker.model_copy(
            update={
                "tls": tls,
                "will": None,
                "spool": None,
                "clean_start": True,
                "client_id": self.claim,
                "reconnect": no_reconnect,
            }
        )

    def attempt(self) -> x509.Certificate:
        """Connect with the claim, send the request, wait for its answer; the accepted certificate is written."""
        ca = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        answers: list[EnrollmentResponse] = []
        arrived = threading.Condition()

        def on_answer(message: Message) -> None:
            if not message.payload:
                return  # a cleared retained answer
            try:
                answer = decode_enrollment_response(message.payload)
            except ProtocolError as exc:
                log.warning("enrollment: an unreadable answer on %s: %s", message.topic, exc)
                return
            with arrived:
                answers.append(answer)
                arrived.notify_all()

        lost: list[ConnectionEvent] = []

        def on_state(event: ConnectionEvent) -> None:
            if event.previous is ConnectionState.CONNECTED:
                with arrived:
                    lost.append(event)
                    arrived.notify_all()

        request = self.request.model_copy(update={"sent_at": utc_now()})
        client = MqttClient(self.claim_settings())
        client.connect()
        # Every box of a batch has the same claim identity, and the broker keeps one connection per identity
        # (use_username_as_clientid): a box that connects closes another's connection. The answer is retained
        # and the request id stays the same across attempts, so a box that lost its connection ends the attempt
        # instead of reconnecting at once (which would close yet another box's), and finds the answer later.
        client.add_listener(on_state)
        try:
            client.subscribe(response_topic(self.claim, request.request_id), on_answer, qos=1, timeout=5.0)
            with arrived:  # an answer kept from an earlier attempt arrives right after the subscription
                arrived.wait_for(lambda: bool(answers) or bool(lost), 0.05)
            if not answers and not lost:
                client.publish(
                    request_topic(self.claim, request.request_id), encode_enrollment(request), qos=1, wait=5.0
                )
            deadline = time.monotonic() + self.options.response_timeout_s
            pending_reason = None
            while True:
                with arrived:
                    while not answers and not lost and time.monotonic() < deadline:
                        arrived.wait(max(0.0, deadline - time.monotonic()))
                    if not answers and lost:
                        raise BrokerError(
                            f"connection lost while waiting for the answer ({lost[0].reason or 'closed by the broker'}; "
                            "another box with the same claim certificate may have connected)"
                        )
                    if not answers:
                        raise TimeoutError(
                            f"no answer within {self.options.response_timeout_s:g} s"
                            + (f" (last: pending, {pending_reason})" if pending_reason else "")
                        )
                    answer = answers.pop(0)
                if answer.request_id == request.request_id and answer.status == "pending":
                    pending_reason = answer.reason or "waiting for an operator"
                    self.status.state = "waiting"
                    self.status.last_error = f"pending: {pending_reason}"
                    self.status.write(self.options.state_file)
                    continue
                certificate = check_response(answer, request, self.key, self.device_id, ca)
                break
        finally:
            client.disconnect()
        _write_public(self.cert_file, certificate.public_bytes(serialization.Encoding.PEM))
        return certificate

    def run(self, once: bool = False) -> bool:
        """Attempt until enrolled (True); with `once`, one attempt. The state file says where it stands."""
        if self.cert_file.exists() and _matches_key(self.cert_file, self.key):
            self._record("enrolled", None)
            return True
        delay = self.options.min_backoff_s
        while True:
            self.status.attempts += 1
            try:
                self.attempt()
            except EnrollmentRefusedError as exc:
                state: State = "refused"
                error = str(exc)
            except (EdgeSDKError, OSError, TimeoutError) as exc:
                state, error = "retrying", f"{type(exc).__name__}: {exc}"
            else:
                self._record("enrolled", None)
                log.info("enrolled as %s; certificate written to %s", self.device_id, self.cert_file)
                return True
            log.warning("enrollment attempt %d: %s", self.status.attempts, error)
            if once:
                self._record(state, error)
                return False
            wait = random.uniform(delay / 2, delay)  # jitter: a batch of boxes powered on together spreads out
            retry_at = utc_now() + datetime.timedelta(seconds=wait)
            self._record(state, error, retry_at.isoformat())
            if not self.sleep(wait):
                return False
            delay = min(delay * 2, self.options.max_backoff_s)

    def _record(self, state: State, error: str | None, next_retry_at: str | None = None) -> None:
        self.status.state, self.status.last_error, self.status.next_retry_at = state, error, next_retry_at
        self.status.write(self.options.state_file)


def _facts(serial: str, config: AgentConfig) -> EnrollmentFacts:
    try:
        return EnrollmentFacts(
            serial=serial, profile=config.profile, labels=dict(config.labels), sdk_version=__version__[:64]
        )
    except ValidationError as exc:
        raise ConfigError(f"cannot describe this box for enrollment: {exc.errors()[0]['msg']} ({serial=})") from None


def _common_name(cert_file: Path) -> str:
    try:
        certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the claim certificate {cert_file}: {exc}") from None
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise ConfigError(f"{cert_file}: expected one common name, got {len(names)}")
    return str(names[0].value)


def _matches_key(cert_file: Path, key: ec.EllipticCurvePrivateKey) -> bool:
    try:
        certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError):
        return False
    return _public_bytes(certificate.public_key()) == _public_bytes(key.public_key())


def _write_public(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    temporary.chmod(0o644)
    temporary.replace(path)
