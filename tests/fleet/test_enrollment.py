"""Enrollment by claim certificate on the shipped TLS + ACL broker (deploy/mosquitto): the claim identity can
only enroll, a box trades it for its own certificate under a policy or an operator's approval, and refuses
answers that are replayed, forged, or for another key."""

from __future__ import annotations

import datetime
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge_sdk.cli.main import cli
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.enrollment import Enroller, EnrollmentOptions, read_status
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.fleet.operator.enrollment import EnrollmentService, load_ca
from edge_sdk.fleet.operator.enrollment_policy import EnrollmentPolicy, RateLimit, load_policy
from edge_sdk.fleet.operator.enrollment_store import EnrollmentStore
from edge_sdk.fleet.wire.enrollment import (
    MAX_REQUEST_BYTES,
    REQUEST_FILTER,
    EnrollmentFacts,
    EnrollmentRequest,
    EnrollmentResponse,
    decode_enrollment_response,
    decode_request,
    encode_enrollment,
    parse_request_topic,
    request_topic,
    response_topic,
)
from edge_sdk.fleet.wire.protocol import Presence, ProtocolError, ProtocolTooLargeError, encode_message, utc_now
from edge_sdk.mqtt import MqttClient, PublishRejectedError, TlsSettings
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.messages import Message
from edge_sdk.mqtt.topics import DeviceTopics
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory, FleetBroker, free_port, start_fleet_broker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

CLAIM, OTHER_CLAIM = "claim-factory", "claim-other"
NOT_AUTHORIZED = 0x87
POLICY = EnrollmentPolicy(serials=["SN-*"], labels={"site": "lyon"}, rate_per_min=100_000)


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=["cam-a"], operators=["operator"], claims=[CLAIM, OTHER_CLAIM])


@dataclass
class Operator:
    service: EnrollmentService
    store: EnrollmentStore
    requests: Inbox


@pytest.fixture
def serve(fleet: FleetBroker, tmp_path: Path) -> Iterator[Callable[[EnrollmentPolicy | None], Operator]]:
    """Starts the operator's enrollment service (one at most per test), stopped at the end."""
    started: list[tuple[MqttClient, EnrollmentService, threading.Thread]] = []

    def start(policy: EnrollmentPolicy | None) -> Operator:
        client = MqttClient(fleet.settings("operator", client_id="operator"))
        client.connect()
        store = EnrollmentStore(tmp_path / "enrollment-state")
        service = EnrollmentService(client, load_ca(fleet.etc_dir), store, policy, poll_s=0.1).start()
        requests = Inbox()
        client.subscribe("edge/enroll/#", requests, qos=1)  # one handler per filter: not REQUEST_FILTER
        thread = threading.Thread(target=service.serve_forever, daemon=True)
        thread.start()
        started.append((client, service, thread))
        return Operator(service, store, requests)

    yield start
    for client, service, thread in started:
        service.stop()
        thread.join(5)
        client.disconnect()


def box(
    fleet: FleetBroker,
    folder: Path,
    device_id: str,
    serial: str,
    labels: dict[str, str] | None = None,
    claim: str = CLAIM,
    port: int | None = None,
    timeout_s: float = 20.0,
    max_backoff_s: float = 1.0,
) -> Enroller:
    """A freshly flashed box: agent.yaml's broker points at its future device.pem/.key; the claim is shipped."""
    tls_dir = folder / "tls"
    broker = fleet.broker.settings(
        tls=TlsSettings(
            ca_file=fleet.etc_dir / "ca.pem", cert_file=tls_dir / "device.pem", key_file=tls_dir / "device.key"
        )
    )
    if port is not None:
        broker = broker.model_copy(update={"port": port})
    config = AgentConfig(
        device_id=device_id,
        broker=broker,
        store_dir=folder / "store",
        labels={"site": "lyon"} if labels is None else labels,
        profile="x86-cpu",
    )
    options = EnrollmentOptions(
        claim_cert=fleet.etc_dir / "claims" / f"{claim}.pem",
        claim_key=fleet.etc_dir / "claims" / f"{claim}.key",
        serial=serial,
        state_file=folder / "enrollment.json",
        response_timeout_s=timeout_s,
        min_backoff_s=0.2,
        max_backoff_s=max_backoff_s,
    )
    return Enroller(config, options)


# ---------------------------------------------------------------- the broker's claim role


def test_enrollment_claim_identity_can_publish_a_request_and_nothing_else(fleet: FleetBroker) -> None:
    # given an operator listening to everything, and a box with the claim certificate
    seen = Inbox()
    with MqttClient(fleet.settings("operator", client_id="operator")) as operator:
        operator.subscribe("#", seen, qos=1)
        with MqttClient(fleet.settings(CLAIM)) as claim:
            # when it publishes an enrollment request, then tries every other kind of topic
            claim.publish(request_topic(CLAIM, "r" * 22), b"{}", qos=1)
            refused = []
            for topic in (
                f"edge/{CLAIM}/state",  # the device patterns would give it a tree: the deny lines take it back
                f"edge/{CLAIM}/results/x",
                "edge/cam-a/state",
                "edge/cam-a/resp",
                request_topic(OTHER_CLAIM, "r" * 22),  # another batch's requests
                response_topic(CLAIM, "r" * 22),  # forging its own answer
                "offload/workers/w",
                "elsewhere",
            ):
                with pytest.raises(PublishRejectedError) as caught:
                    claim.publish(topic, b"forged", qos=1)
                refused.append(caught.value.reason_code)
            arrived = seen.settle(0.5)

    # then only the request reaches anyone
    assert refused == [NOT_AUTHORIZED] * 8
    assert [m.topic for m in arrived] == [request_topic(CLAIM, "r" * 22)]


def test_enrollment_claim_identity_reads_only_its_own_answers(fleet: FleetBroker) -> None:
    # given a box with the claim certificate subscribed to everything it can name
    spy = Inbox()
    with MqttClient(fleet.settings(CLAIM)) as claim, MqttClient(fleet.settings(OTHER_CLAIM)) as other:
        for topic_filter in ("#", "edge/#", "edge/enroll/#", f"edge/{CLAIM}/#", "offload/#"):
            claim.subscribe(topic_filter, spy, qos=1)
        other_spy = Inbox()
        other.subscribe("#", other_spy, qos=1)
        # when the operator writes commands, desired state, another claim's answer, a load report and its answer
        with MqttClient(fleet.settings("operator", client_id="operator")) as operator:
            for topic in (
                "edge/cam-a/cmd",
                "edge/cam-a/desired",
                f"edge/{CLAIM}/cmd",
                f"edge/{CLAIM}/desired",
                response_topic(OTHER_CLAIM, "o" * 22),
                request_topic(CLAIM, "q" * 22),
                response_topic(CLAIM, "m" * 22),
            ):
                operator.publish(topic, b"x", qos=1)
        mine = spy.settle(0.7)
        theirs = other_spy.settle(0.3)

    # then the claim sees only the answer on its own enrollment tree (once per matching subscription)
    assert {m.topic for m in mine} == {response_topic(CLAIM, "m" * 22)}
    assert {m.topic for m in theirs} == {response_topic(OTHER_CLAIM, "o" * 22)}


# ---------------------------------------------------------------- a full enrollment


def test_enrollment_box_enrolls_under_policy_then_connects_as_itself_and_appears_in_the_fleet(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    # given the operator's service under a policy and a box whose serial and labels meet it
    operator = serve(POLICY)
    enroller = box(fleet, tmp_path / "box", "cam-101", "SN-101")

    # when the box enrolls
    assert enroller.run(once=True)

    # then it holds its own key (0600) and a certificate for it, named after its device id
    key_file, cert_file = enroller.key_file, enroller.cert_file
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "cam-101"
    status = read_status(tmp_path / "box" / "enrollment.json")
    assert status["state"] == "enrolled" and status["device_id"] == "cam-101" and status["attempts"] == 1
    request = decode_request(operator.requests.wait_for(1)[0].payload)
    assert "PRIVATE" not in request.csr_pem and request.facts.serial == "SN-101"
    assert [(r.serial, r.state, r.device_id) for r in operator.store.records()] == [("SN-101", "enrolled", "cam-101")]

    # and it connects with its own identity and shows up like `fleet ls` shows devices
    presence = Presence(device="cam-101", online=True, profile="x86-cpu", labels={"site": "lyon"}, since=utc_now())
    with MqttClient(enroller.config.broker) as device:
        device.publish(DeviceTopics("cam-101").state, encode_message(presence), qos=1, retain=True)
    with MqttClient(fleet.settings("operator", client_id="operator-2")) as client:
        fleet_view = FleetOperator(client).start()
        fleet_view.settle(quiet_s=0.3, timeout=10)
        assert [(d.device, d.presence is not None and d.presence.online) for d in fleet_view.devices()] == [
            ("cam-101", True)
        ]
        fleet_view.close()

    # and a second run finds the certificate in place and does nothing
    assert enroller.run(once=True)


def test_enrollment_without_policy_waits_for_an_operator_approval_from_the_cli(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    # given a service without policy and a box asking
    operator = serve(None)
    enroller = box(fleet, tmp_path / "box", "cam-102", "SN-102", timeout_s=30)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(enroller.run(once=True)))
    thread.start()
    deadline = time.monotonic() + 20
    while read_status(tmp_path / "box" / "enrollment.json")["state"] != "waiting" and time.monotonic() < deadline:
        time.sleep(0.05)
    state_dir = str(operator.store.path.parent)
    listed = CliRunner().invoke(cli, ["fleet", "enroll", "list", "--state", state_dir])
    assert listed.exit_code == 0 and "SN-102" in listed.output and "pending" in listed.output

    # when an operator approves it
    approved = CliRunner().invoke(cli, ["fleet", "enroll", "approve", "SN-102", "--state", state_dir])
    thread.join(40)

    # then the box gets its certificate
    assert approved.exit_code == 0, approved.output
    assert outcome == [True]
    assert read_status(tmp_path / "box" / "enrollment.json")["state"] == "enrolled"


# ---------------------------------------------------------------- refusals


def test_enrollment_revoked_serial_is_refused(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    operator = serve(POLICY)
    operator.store.revoke("SN-666")
    enroller = box(fleet, tmp_path / "box", "cam-666", "SN-666")

    assert not enroller.run(once=True)

    status = read_status(tmp_path / "box" / "enrollment.json")
    assert status["state"] == "refused" and "revoked" in status["last_error"]
    assert not enroller.cert_file.exists()


def test_enrollment_serial_already_enrolled_is_refused_until_the_operator_allows_a_re_enrollment(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    # given a serial enrolled once
    operator = serve(POLICY)
    assert box(fleet, tmp_path / "first", "cam-103", "SN-103").run(once=True)

    # when a box with the same serial (re-flashed, or a clone) asks again
    again = box(fleet, tmp_path / "second", "cam-103", "SN-103")
    refused = again.run(once=True)
    status = read_status(tmp_path / "second" / "enrollment.json")

    # then it is refused, until the operator allows it explicitly
    assert not refused and status["state"] == "refused" and "enrolled already" in status["last_error"]
    with pytest.raises(Exception, match="--re-enroll"):
        operator.store.approve("SN-103")
    operator.store.approve("SN-103", re_enroll=True)
    deadline = time.monotonic() + 20
    while not again.run(once=True) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read_status(tmp_path / "second" / "enrollment.json")["state"] == "enrolled"


@dataclass
class FakeOperator:
    """Answers every request with what `answer(request, raw)` makes: a replay, a forgery."""

    client: MqttClient

    def start(self, answer: Callable[[Message], EnrollmentResponse | bytes]) -> None:
        def on_request(message: Message) -> None:
            where = parse_request_topic(message.topic)
            assert where is not None
            made = answer(message)
            payload = made if isinstance(made, bytes) else encode_enrollment(made)
            self.client.publish(response_topic(*where), payload, qos=1, wait=False)

        self.client.subscribe(REQUEST_FILTER, on_request, qos=1)


def _certificate_for(public_key: ec.EllipticCurvePublicKey, name: str, signer: ec.EllipticCurvePrivateKey) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge-sdk fleet CA")]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(signer, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def test_enrollment_box_refuses_replayed_and_forged_answers(fleet: FleetBroker, tmp_path: Path) -> None:
    ca = load_ca(fleet.etc_dir)
    recorded: list[EnrollmentResponse] = []

    def honest(message: Message) -> EnrollmentResponse:
        request = decode_request(message.payload)
        csr = x509.load_pem_x509_csr(request.csr_pem.encode())
        certificate = ca.sign_client_csr(csr, csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
        response = EnrollmentResponse(
            request_id=request.request_id,
            nonce=request.nonce,
            status="approved",
            device_id="cam-104",
            certificate_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        )
        recorded.append(response)
        return response

    def replayed(message: Message) -> EnrollmentResponse:  # the recorded answer, on this request's topic
        request = decode_request(message.payload)
        return recorded[0].model_copy(update={"request_id": request.request_id})

    def replayed_whole(message: Message) -> EnrollmentResponse:
        return recorded[0]

    def self_signed(message: Message) -> EnrollmentResponse:  # right key and ids, but not the fleet CA's
        request = decode_request(message.payload)
        csr = x509.load_pem_x509_csr(request.csr_pem.encode())
        rogue = ec.generate_private_key(ec.SECP256R1())
        pem = _certificate_for(csr.public_key(), "cam-104", rogue)  # type: ignore[arg-type]
        return EnrollmentResponse(
            request_id=request.request_id,
            nonce=request.nonce,
            status="approved",
            device_id="cam-104",
            certificate_pem=pem,
        )

    def other_key(message: Message) -> EnrollmentResponse:  # signed by the fleet CA, but for someone else's key
        request = decode_request(message.payload)
        stranger = ec.generate_private_key(ec.SECP256R1()).public_key()
        pem = _certificate_for(stranger, "cam-104", ca.key)
        return EnrollmentResponse(
            request_id=request.request_id,
            nonce=request.nonce,
            status="approved",
            device_id="cam-104",
            certificate_pem=pem,
        )

    with MqttClient(fleet.settings("operator", client_id="operator")) as client:
        # a box enrolls honestly once; its answer is recorded
        fake = FakeOperator(client)
        answer: list[Callable[[Message], EnrollmentResponse]] = [honest]
        fake.start(lambda message: answer[0](message))
        assert box(fleet, tmp_path / "honest", "cam-104", "SN-104").run(once=True)

        outcomes = {}
        for name, forge in (
            ("replayed", replayed),
            ("replayed-whole", replayed_whole),
            ("self-signed", self_signed),
            ("other-key", other_key),
        ):
            answer[0] = forge
            victim = box(fleet, tmp_path / name, "cam-104", "SN-104", timeout_s=3)
            enrolled = victim.run(once=True)
            status = read_status(tmp_path / name / "enrollment.json")
            outcomes[name] = (enrolled, victim.cert_file.exists(), status["state"], status["last_error"])

    assert outcomes["replayed"][:3] == (False, False, "refused") and "nonce" in outcomes["replayed"][3]
    assert outcomes["replayed-whole"][:3] == (False, False, "refused") and "nonce" in outcomes["replayed-whole"][3]
    assert outcomes["self-signed"][:3] == (False, False, "refused") and "fleet CA" in outcomes["self-signed"][3]
    assert outcomes["other-key"][:3] == (False, False, "refused") and "another key" in outcomes["other-key"][3]


def test_enrollment_with_the_broker_down_retries_with_backoff_and_says_so(fleet: FleetBroker, tmp_path: Path) -> None:
    # given a box whose broker does not answer (nothing listens on the port)
    enroller = box(fleet, tmp_path / "box", "cam-105", "SN-105", port=free_port())
    waits: list[float] = []
    statuses: list[dict[str, object]] = []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        statuses.append(read_status(tmp_path / "box" / "enrollment.json"))
        return len(waits) < 5

    enroller.sleep = sleep

    # when it tries to enroll
    assert not enroller.run()

    # then it waited longer each time up to the cap (with jitter: between half and all of 0.2, 0.4, 0.8, 1, 1 s)
    nominal = [0.2, 0.4, 0.8, 1.0, 1.0]
    assert all(n / 2 <= w <= n for w, n in zip(waits, nominal, strict=True)), waits
    last = statuses[-1]
    assert last["state"] == "retrying" and last["attempts"] == 5
    assert last["last_error"] and last["next_retry_at"]
    assert datetime.datetime.fromisoformat(str(last["next_retry_at"])) > datetime.datetime.fromisoformat(
        str(last["updated_at"])
    ) - datetime.timedelta(seconds=1)


def test_enrollment_cli_enrolls_a_box_from_its_agent_yaml(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    serve(POLICY)
    folder = tmp_path / "etc-edge-sdk"
    enroller = box(fleet, folder, "cam-106", "SN-106")
    config_file = folder / "agent.yaml"
    config_file.write_text(json.dumps(enroller.config.model_dump(mode="json", exclude_none=True)))
    claims = fleet.etc_dir / "claims"
    result = CliRunner().invoke(
        cli,
        [
            "device", "enroll", "--config", str(config_file), "--claim-cert", str(claims / f"{CLAIM}.pem"),
            "--claim-key", str(claims / f"{CLAIM}.key"), "--serial", "SN-106",
            "--state", str(folder / "enrollment.json"), "--once",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "enrolled as cam-106" in result.output
    assert read_status(folder / "enrollment.json")["state"] == "enrolled"


# ---------------------------------------------------------------- many boxes at once


def test_enrollment_100_boxes_sharing_one_claim_enroll_concurrently(
    fleet: FleetBroker, serve: Callable[[EnrollmentPolicy | None], Operator], tmp_path: Path
) -> None:
    # given 100 boxes of one batch (one claim certificate) powered on together
    count = 100
    serve(POLICY)
    boxes = [
        box(fleet, tmp_path / f"box-{i:03d}", f"cam-{i:03d}", f"SN-{i:03d}", timeout_s=15, max_backoff_s=10)
        for i in range(count)
    ]
    results: dict[int, bool] = {}

    def enroll(index: int) -> None:
        results[index] = boxes[index].run()

    # when they all enroll at once
    started = time.monotonic()
    threads = [threading.Thread(target=enroll, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(150)
    elapsed = time.monotonic() - started

    # then every one has its own certificate, for its own key
    certificates = [x509.load_pem_x509_certificate(b.cert_file.read_bytes()) for b in boxes if b.cert_file.exists()]
    attempts = [b.status.attempts for b in boxes]
    print(f"\n100 boxes enrolled in {elapsed:.1f} s; attempts per box: max {max(attempts)}, total {sum(attempts)}")
    assert sum(results.values()) == count
    assert len({c.serial_number for c in certificates}) == count
    assert len({c.subject.rfc4514_string() for c in certificates}) == count
    assert len({c.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) for c in certificates}) == count  # fmt: skip


def test_certificate_authority_signs_a_csr_with_make_certs_parameters(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(days=1)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "asked-for")]))
        .sign(key, hashes.SHA256())
    )
    certificate = ca.sign_client_csr(csr, "cam-9", days=30)
    certificate.verify_directly_issued_by(ca.certificate)
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "cam-9"
    assert certificate.not_valid_after_utc <= ca.certificate.not_valid_after_utc
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


# ---------------------------------------------------------------- the policy


def test_enrollment_policy_file_with_an_unknown_key_or_a_bad_value_says_file_and_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("serials: [SN-1]\nlabels: {site: lyon}\nrate_per_minute: 5\n")
    with pytest.raises(Exception, match=r"policy\.yaml:3.*rate_per_minute"):
        load_policy(policy)
    policy.write_text("serials: [SN-1]\nrate_per_min: -1\n")
    with pytest.raises(Exception, match=r"policy\.yaml:2"):
        load_policy(policy)


def test_enrollment_policy_matches_serial_patterns_labels_claims_and_the_device_id_rule() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cam-7")]))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
        .decode()
    )

    def request(serial: str, labels: dict[str, str]) -> EnrollmentRequest:
        facts = EnrollmentFacts(serial=serial, labels=labels)
        return EnrollmentRequest(request_id="r" * 22, nonce="n" * 22, csr_pem=csr, facts=facts)

    policy = EnrollmentPolicy(serials=["SN-2026-*"], labels={"site": "lyon"}, claims=[CLAIM], device_id="cam-{serial}")
    assert policy.allows(request("SN-2026-7", {"site": "lyon", "line": "3"}), CLAIM) is None
    assert "allow-list" in str(policy.allows(request("SN-2025-7", {"site": "lyon"}), CLAIM))
    assert "site=lyon" in str(policy.allows(request("SN-2026-7", {"site": "paris"}), CLAIM))
    assert "claim" in str(policy.allows(request("SN-2026-7", {"site": "lyon"}), OTHER_CLAIM))
    assert policy.expected_device_id(request("SN-2026-7", {}), "cam-7") == "cam-SN-2026-7"


def test_enrollment_rate_limit_allows_a_burst_then_one_per_interval() -> None:
    now = [0.0]
    limit = RateLimit(per_min=2, clock=lambda: now[0])
    assert [limit.take(), limit.take(), limit.take()] == [True, True, False]
    now[0] = 30.0
    assert [limit.take(), limit.take()] == [True, False]


def test_enrollment_messages_are_decoded_strictly() -> None:
    good = EnrollmentResponse(request_id="r" * 22, nonce="n" * 22, status="pending", reason="wait")
    assert decode_enrollment_response(encode_enrollment(good)) == good
    data = json.loads(encode_enrollment(good))
    with pytest.raises(ProtocolError, match="extra"):
        decode_enrollment_response(json.dumps({**data, "extra": 1}).encode())
    with pytest.raises(ProtocolError):
        decode_enrollment_response(json.dumps({**data, "status": "maybe"}).encode())
    with pytest.raises(ProtocolError):
        decode_enrollment_response(b'{"request_id": "r", "request_id": "r"}')
    with pytest.raises(ProtocolTooLargeError):
        decode_request(b" " * (MAX_REQUEST_BYTES + 1))


def test_enrollment_fleet_enroll_serve_command_signs_under_a_policy_and_stops_on_sigterm(
    fleet: FleetBroker, tmp_path: Path
) -> None:
    # given `edge-sdk fleet enroll serve --auto` in its own process, with the operator's broker file and a policy
    broker_file = tmp_path / "operator.yaml"
    broker_file.write_text(json.dumps(fleet.settings("operator").model_dump(mode="json", exclude_none=True)))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("serials: ['SN-2*']\nlabels: {site: lyon}\n")
    command = [
        str(Path(sys.executable).with_name("edge-sdk")), "fleet", "enroll", "serve", "--broker", str(broker_file),
        "--ca-dir", str(fleet.etc_dir), "--state", str(tmp_path / "state"), "--auto", "--policy", str(policy_file),
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = ""
    try:
        assert server.stdout is not None
        first = server.stdout.readline()  # subscribed: a request sent before would find nobody listening
        assert first.startswith("serving enrollment requests"), first
        # when a box enrolls
        enrolled = box(fleet, tmp_path / "box", "cam-201", "SN-201", timeout_s=30).run(once=True)
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=20)
        output = first + output

    # then it got its certificate, and the service said so when it stopped
    assert enrolled, output
    assert server.returncode == 0, output
    assert "signed 1 certificate(s)" in output
    listed = CliRunner().invoke(cli, ["fleet", "enroll", "list", "--state", str(tmp_path / "state"), "--json"])
    assert [(r["serial"], r["state"], r["device_id"]) for r in json.loads(listed.output)] == [
        ("SN-201", "enrolled", "cam-201")
    ]
