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

import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from edge_sdk.core.errors import ConfigError
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
from edge_sdk.fleet.wire.protocol import ProtocolError
from edge_sdk.mqtt import MqttClient
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.messages import Message

from .enrollment_policy import EnrollmentPolicy, RateLimit
from .enrollment_store import EnrollmentStore

log = logging.getLogger(__name__)


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
