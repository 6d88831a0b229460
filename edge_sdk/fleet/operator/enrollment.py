"""The operator's enrollment service: answer boxes' enrollment requests with device certificates.

`EnrollmentService` subscribes to `edge/enroll/+/+/request`, records every request per serial in a SQLite
store (`EnrollmentStore`), and answers on the request's response topic (retained, so a box that lost its
connection finds it when it subscribes again; cleared once answered for `response_ttl_s`):

- a revoked serial: refused;
- a serial already enrolled: refused, unless the operator allowed a re-enrollment (`approve --re-enroll`);
- with a policy (`--auto`): a request that meets it is signed at once; one over the rate limit is answered
  `pending` (the box asks again later); one that does not meet it waits for an operator;
- otherwise pending until `edge-sdk fleet enroll approve SERIAL` (the service signs it on its next poll)
  or `reject SERIAL`.

The certificate is signed by the fleet CA (`ca.pem` + `ca.key`, as deploy/mosquitto/make_certs.py writes
them) with make_certs' parameters (`CertificateAuthority.sign_client_csr`): EC key from the box's CSR,
client-auth usage, common name = the device id.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.fleet.wire.enrollment import (
    REQUEST_FILTER,
    EnrollmentRequest,
    EnrollmentResponse,
    check_device_name,
    decode_request,
    encode_enrollment,
    parse_request_topic,
    response_topic,
)
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.fleet.wire.protocol import ProtocolError, utc_now
from edge_sdk.mqtt import MqttClient
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.messages import Message

log = logging.getLogger(__name__)

STATES = ("pending", "approved", "enrolled", "rejected", "revoked")


class EnrollmentPolicy(BaseModel):
    """`--policy policy.yaml`: which requests `fleet enroll serve --auto` signs without an operator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    serials: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        description="Allowed serials; shell patterns (`SN-2026-*`) match many."
    )
    labels: dict[Annotated[str, Field(pattern=IDENTIFIER_PATTERN)], str] = Field(
        default_factory=dict, description="Labels a box must report with these values, e.g. {site: lyon}."
    )
    claims: list[str] = Field(
        default_factory=list, description="Claim identities accepted (`claim-<batch>`); empty: any claim."
    )
    rate_per_min: float = Field(60.0, gt=0, le=100_000, description="Certificates signed per minute at most.")
    device_id: str = Field(
        "{requested}",
        max_length=128,
        description="The device id: `{requested}` (the CSR's common name) or a template of `{serial}`, e.g. "
        "`cam-{serial}`; a request asking for another id is refused.",
    )
    days: int = Field(825, ge=1, le=3650, description="Validity of the device certificates.")

    def allows(self, request: EnrollmentRequest, claim: str) -> str | None:
        """None when the request meets the policy, else why not."""
        facts = request.facts
        if not any(fnmatch.fnmatchcase(facts.serial, pattern) for pattern in self.serials):
            return f"serial {facts.serial} is not in the allow-list"
        if self.claims and claim not in self.claims:
            return f"claim {claim} is not accepted"
        for name, value in self.labels.items():
            if facts.labels.get(name) != value:
                return f"expected label {name}={value}, got {facts.labels.get(name)!r}"
        return None

    def expected_device_id(self, request: EnrollmentRequest, requested: str) -> str:
        return self.device_id.replace("{requested}", requested).replace("{serial}", request.facts.serial)


def load_policy(path: Path) -> EnrollmentPolicy:
    return load_yaml_model(path, EnrollmentPolicy)


@dataclass(frozen=True)
class EnrollmentRecord:
    serial: str
    state: str
    device_id: str | None
    claim: str | None
    request_id: str | None
    re_enroll: bool
    facts: dict[str, Any]
    reason: str | None
    updated_at: str


class EnrollmentStore:
    """One row per serial: its state, the latest request (CSR, ids) and the certificate issued. SQLite, so
    the serving process and the `list|approve|reject|revoke` commands can share it."""

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "enrollment.db"
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS serials (serial TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT 'pending', device_id TEXT, "
                "claim TEXT, request_id TEXT, nonce TEXT, csr_pem TEXT, facts TEXT NOT NULL DEFAULT '{}', "
                "certificate_pem TEXT, re_enroll INTEGER NOT NULL DEFAULT 0, reason TEXT, "
                "answered INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL)"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = sqlite3.connect(self.path, timeout=30)
            try:
                with db:
                    yield db
            finally:
                db.close()

    def get(self, serial: str) -> dict[str, Any] | None:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM serials WHERE serial = ?", (serial,)).fetchone()
        return None if row is None else dict(row)

    def records(self) -> list[EnrollmentRecord]:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM serials ORDER BY serial").fetchall()
        return [
            EnrollmentRecord(
                serial=row["serial"],
                state=row["state"],
                device_id=row["device_id"],
                claim=row["claim"],
                request_id=row["request_id"],
                re_enroll=bool(row["re_enroll"]),
                facts=json.loads(row["facts"]),
                reason=row["reason"],
                updated_at=row["updated_at"],
            )
            for row in rows
        ]

    def upsert(self, serial: str, **values: Any) -> None:
        values["updated_at"] = utc_now().isoformat()
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        updates = ", ".join(f"{name} = excluded.{name}" for name in values)
        with self._connect() as db:
            db.execute(
                f"INSERT INTO serials (serial, {columns}) VALUES (?, {marks}) "
                f"ON CONFLICT(serial) DO UPDATE SET {updates}",
                (serial, *values.values()),
            )

    def approve(self, serial: str, re_enroll: bool = False) -> str:
        row = self.get(serial)
        if row is None:
            if not re_enroll:
                raise ConfigError(f"no enrollment request from serial {serial}")
            self.upsert(serial, state="approved", re_enroll=1)
            return "approved: its next request will be signed"
        if row["state"] == "revoked":
            raise ConfigError(f"serial {serial} is revoked; it cannot enroll again")
        if row["state"] == "enrolled" and not re_enroll:
            raise ConfigError(f"serial {serial} is enrolled already (as {row['device_id']}): give --re-enroll")
        self.upsert(serial, state="approved", re_enroll=int(re_enroll), answered=0)
        return "approved: the serving `fleet enroll serve` signs it"

    def reject(self, serial: str) -> None:
        if self.get(serial) is None:
            raise ConfigError(f"no enrollment request from serial {serial}")
        self.upsert(serial, state="rejected", reason="rejected by an operator", answered=0)

    def revoke(self, serial: str) -> None:
        self.upsert(serial, state="revoked", reason="revoked by an operator", answered=0)

    def unanswered(self, state: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM serials WHERE state = ? AND answered = 0 AND request_id IS NOT NULL", (state,)
            ).fetchall()
        return [dict(row) for row in rows]


class RateLimit:
    """A token bucket: `per_min` signatures a minute, bursts up to the same number."""

    def __init__(self, per_min: float, clock: Any = time.monotonic):
        self.rate = per_min / 60.0
        self.capacity = max(1.0, per_min)
        self.tokens = self.capacity
        self.clock = clock
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class EnrollmentService:
    """Serves enrollment requests on a connected operator client until `stop()`."""

    def __init__(
        self,
        client: MqttClient,
        ca: CertificateAuthority,
        store: EnrollmentStore,
        policy: EnrollmentPolicy | None = None,
        days: int = 825,
        response_ttl_s: float = 600.0,
        poll_s: float = 1.0,
    ):
        self.client = client
        self.ca = ca
        self.store = store
        self.policy = policy
        self.days = policy.days if policy is not None else days
        self.rate = RateLimit(policy.rate_per_min) if policy is not None else None
        self.response_ttl_s = response_ttl_s
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._retained: deque[tuple[float, str]] = deque()
        self._stop = threading.Event()
        self.signed = 0

    def start(self) -> EnrollmentService:
        self.client.subscribe(REQUEST_FILTER, self._on_request, qos=1)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.client.unsubscribe(REQUEST_FILTER)

    def serve_forever(self) -> None:
        """Sign what operators approved meanwhile, clear old answers; until `stop()`."""
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        for candidate in self.store.unanswered("approved"):
            with self._lock:
                row = self.store.get(candidate["serial"])
                if row is not None and row["state"] == "approved" and not row["answered"]:
                    self._sign(row["serial"], row["claim"], _stored_request(row), re_enroll=bool(row["re_enroll"]))
        for state in ("rejected", "revoked"):
            for row in self.store.unanswered(state):
                self._answer(row["claim"], _stored_request(row), "refused", reason=row["reason"])
                self.store.upsert(row["serial"], answered=1)
        cutoff = time.monotonic() - self.response_ttl_s
        while self._retained and self._retained[0][0] < cutoff:
            _, topic = self._retained.popleft()
            self.client.publish(topic, b"", qos=1, retain=True, wait=False)

    # ---------------------------------------------------------------- requests
    def _on_request(self, message: Message) -> None:
        where = parse_request_topic(message.topic)
        if where is None:
            return
        claim, request_id = where
        try:
            request = decode_request(message.payload)
        except ProtocolError as exc:
            log.warning("enrollment: an unreadable request on %s: %s", message.topic, exc)
            return
        if request.request_id != request_id:
            log.warning("enrollment: request id %s sent on %s; ignored", request.request_id, message.topic)
            return
        with self._lock:
            try:
                self._handle(claim, request)
            except Exception:
                log.exception("enrollment: request %s of serial %s failed", request_id, request.facts.serial)

    def _handle(self, claim: str, request: EnrollmentRequest) -> None:
        serial = request.facts.serial
        row = self.store.get(serial)
        state = None if row is None else row["state"]
        try:
            csr = x509.load_pem_x509_csr(request.csr_pem.encode())
            requested = _common_name(csr)
            check_device_name(requested)
        except (ValueError, ConfigError) as exc:
            self._answer(claim, request, "refused", reason=f"bad CSR: {exc}")
            return
        record = {
            "claim": claim,
            "request_id": request.request_id,
            "nonce": request.nonce,
            "csr_pem": request.csr_pem,
            "facts": json.dumps(request.facts.model_dump(mode="json")),
        }
        if (
            state == "enrolled"
            and row is not None
            and (row["request_id"], row["nonce"]) == (request.request_id, request.nonce)
            and row["certificate_pem"]
        ):  # the box asks again for an answer it missed: the same certificate again
            self._answer(claim, request, "approved", device_id=row["device_id"], certificate_pem=row["certificate_pem"])
            return
        if state == "revoked":
            self.store.upsert(serial, **record, answered=1)
            self._answer(claim, request, "refused", reason=f"serial {serial} is revoked")
            return
        if state == "rejected" and row is not None and row["request_id"] == request.request_id:
            self._answer(claim, request, "refused", reason=row["reason"])
            return
        if state == "approved" and row is not None:
            self.store.upsert(serial, **record)
            self._sign(serial, claim, request, re_enroll=bool(row["re_enroll"]))
            return
        if state == "enrolled":
            self.store.upsert(serial, **record, answered=1)
            self._answer(
                claim,
                request,
                "refused",
                reason=f"serial {serial} is enrolled already; an operator must allow it again "
                f"(edge-sdk fleet enroll approve {serial} --re-enroll)",
            )
            return
        if self.policy is not None:
            why = self.policy.allows(request, claim)
            if why is None:
                expected = self.policy.expected_device_id(request, requested)
                if expected != requested:
                    self._answer(claim, request, "refused", reason=f"expected device id {expected}, got {requested}")
                    return
                assert self.rate is not None
                if not self.rate.take():
                    self._answer(claim, request, "pending", reason="rate limit reached; ask again later", keep=False)
                    return
                self.store.upsert(serial, **record, state="approved", re_enroll=0)
                self._sign(serial, claim, request, re_enroll=False)
                return
            reason = f"waiting for an operator: {why}"
        else:
            reason = "waiting for an operator (edge-sdk fleet enroll approve)"
        self.store.upsert(serial, **record, state="pending", reason=reason, answered=0)
        self._answer(claim, request, "pending", reason=reason)

    def _sign(self, serial: str, claim: str, request: EnrollmentRequest, re_enroll: bool) -> None:
        try:
            csr = x509.load_pem_x509_csr(request.csr_pem.encode())
            device_id = check_device_name(_common_name(csr))
            owner = self._owner(device_id)
            if owner is not None and owner != serial:
                raise ConfigError(f"device id {device_id} belongs to serial {owner}")
            certificate = self.ca.sign_client_csr(csr, device_id, self.days)
        except (ValueError, ConfigError) as exc:
            self.store.upsert(serial, state="rejected", reason=str(exc), answered=1)
            self._answer(claim, request, "refused", reason=str(exc))
            return
        pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
        self.store.upsert(
            serial, state="enrolled", device_id=device_id, certificate_pem=pem, re_enroll=0, reason=None, answered=1
        )
        self.signed += 1
        self._answer(claim, request, "approved", device_id=device_id, certificate_pem=pem)
        log.info("enrollment: serial %s enrolled as %s%s", serial, device_id, " (again)" if re_enroll else "")

    def _owner(self, device_id: str) -> str | None:
        with self.store._connect() as db:
            row = db.execute(
                "SELECT serial FROM serials WHERE device_id = ? AND state IN ('enrolled', 'revoked')", (device_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def _answer(self, claim: str, request: EnrollmentRequest, status: str, keep: bool = True, **values: Any) -> None:
        response = EnrollmentResponse.model_validate(
            {"request_id": request.request_id, "nonce": request.nonce, "status": status, **values}
        )
        topic = response_topic(claim, request.request_id)
        self.client.publish(topic, encode_enrollment(response), qos=1, retain=keep, wait=False)
        if keep:
            self._retained.append((time.monotonic(), topic))


def _stored_request(row: dict[str, Any]) -> EnrollmentRequest:
    return EnrollmentRequest.model_validate(
        {
            "request_id": row["request_id"],
            "nonce": row["nonce"],
            "csr_pem": row["csr_pem"],
            "facts": json.loads(row["facts"]),
        }
    )


def _common_name(csr: x509.CertificateSigningRequest) -> str:
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise ConfigError(f"expected one common name in the CSR, got {len(names)}")
    return str(names[0].value)


def load_ca(ca_dir: Path) -> CertificateAuthority:
    """The fleet CA as make_certs.py writes it: `ca.pem` and `ca.key` in `ca_dir`."""
    return CertificateAuthority.load(ca_dir / "ca.pem", ca_dir / "ca.key")
