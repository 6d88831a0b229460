"""The offload topics on the fleet's TLS + ACL broker, as `fleet init` writes it (certificates, acl,
mosquitto.conf, agent.yaml, worker.yaml), on a real Mosquitto: a device publishes requests only under
its own prefix and reads only its own answers, a worker (its own identity) reads the requests through
the shared subscription and answers, only workers write load reports and everybody reads them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloud_offload.protocol import (
    DEFAULT_GROUP,
    LOAD_ROOT,
    load_topic,
    new_correlation,
    request_topic,
    response_topic,
    worker_subscription,
)
from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.fleet.operator.broker_config import mosquitto_config
from edge_sdk.fleet.operator.example_fleet import write_example_fleet
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.mqtt import Message, MqttClient, MqttSettings, PublishRejectedError, ReconnectPolicy, TlsSettings, Will
from edge_sdk.mqtt.certificates import CertificateAuthority
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory

pytestmark = [pytest.mark.broker, pytest.mark.timeout(30)]

NOT_AUTHORIZED = 0x87
A, B = "cam-a", "cam-b"
WORKERS = ("worker-1", "worker-2")
KEY = "0123456789abcdef"


@dataclass(frozen=True)
class OffloadFleet:
    """`fleet init`'s folder with its broker running; client settings from its own files."""

    folder: Path
    port: int

    def device(self, name: str) -> MqttSettings:
        settings = load_agent_config(self.folder / A / "agent.yaml").broker
        if name != A:  # a second device of the same CA, set up as fleet init sets up the first
            tls = TlsSettings(ca_file=self.folder / A / "ca.pem", **self._identity(name))
            settings = settings.model_copy(update={"tls": tls, "client_id": name})
        return self._quick(settings)

    def worker(self, name: str = WORKERS[0], **overrides: object) -> MqttSettings:
        return self._quick(load_broker_file(self.folder / name / "worker.yaml"), **overrides)

    def operator(self) -> MqttSettings:
        return self._quick(load_broker_file(self.folder / "operator" / "operator.yaml"))

    def _identity(self, name: str) -> dict[str, Path]:
        cert, key = self.folder / "extra" / f"{name}.pem", self.folder / "extra" / f"{name}.key"
        if not cert.exists():
            ca = CertificateAuthority.load(self.folder / "ca" / "ca.pem", self.folder / "ca" / "ca.key")
            ca.issue_client(name, cert, key, days=1)
        return {"cert_file": cert, "key_file": key}

    def _quick(self, settings: MqttSettings, **overrides: object) -> MqttSettings:
        update = {
            "port": self.port,
            "spool": None,
            "clean_start": True,
            "connect_timeout_s": 5.0,
            "publish_timeout_s": 5.0,
            "reconnect": ReconnectPolicy(min_delay_s=0.1, max_delay_s=0.5),
            **overrides,
        }
        return settings.model_copy(update=update)


@pytest.fixture
def fleet(start_broker: BrokerFactory, tmp_path: Path) -> OffloadFleet:
    folder = tmp_path / "fleet"
    write_example_fleet(folder, device=A, workers=WORKERS)
    broker = start_broker(
        folder=folder / "broker", config=lambda b: mosquitto_config(folder / "broker", b.host, b.port)
    )
    return OffloadFleet(folder, broker.port)


@pytest.fixture
def clients(fleet: OffloadFleet) -> Iterator[dict[str, MqttClient]]:
    """Devices A and B, worker-1 and the operator, connected."""
    made = {
        A: MqttClient(fleet.device(A)),
        B: MqttClient(fleet.device(B)),
        WORKERS[0]: MqttClient(fleet.worker()),
        "operator": MqttClient(fleet.operator()),
    }
    try:
        for client in made.values():
            client.connect()
        yield made
    finally:
        for client in made.values():
            client.disconnect()


def test_offload_acl_when_device_b_listens_on_device_a_responses_gets_nothing_and_a_gets_its_answer(
    clients: dict[str, MqttClient],
) -> None:
    # given device A on its own response topic, and device B on A's by every filter it can think of
    own, spy = Inbox(), Inbox()
    clients[A].subscribe(response_topic(A), own, qos=1)
    for topic_filter in (response_topic(A), "edge/+/offload/resp", f"$share/spy/{response_topic(A)}", "edge/#", "#"):
        clients[B].subscribe(topic_filter, spy, qos=1)

    # when a worker answers A
    correlation = new_correlation()
    clients[WORKERS[0]].publish(response_topic(A), b"answer for A", qos=1, correlation_data=correlation)
    delivered = own.wait_for(1)
    leaked = spy.settle(0.4)

    # then
    assert [(m.payload, m.correlation_data) for m in delivered] == [(b"answer for A", correlation)], (
        "A gets its answer with its correlation data"
    )
    assert leaked == [], "B sees nothing of A's answers, whatever filter it subscribes with"


def test_offload_acl_when_a_device_publishes_under_another_device_prefix_is_refused_with_0x87(
    clients: dict[str, MqttClient],
) -> None:
    # given worker-1 in the workers' group and device B waiting for its answers
    requests, answers = Inbox(), Inbox()
    clients[WORKERS[0]].subscribe(worker_subscription(), requests, qos=1)
    clients[B].subscribe(response_topic(B), answers, qos=1)

    # when device A sends a request as B, forges an answer to B, or answers itself
    refusals = []
    for topic in (request_topic(B, KEY, "whole"), response_topic(B), response_topic(A)):
        with pytest.raises(PublishRejectedError) as caught:
            clients[A].publish(topic, b"forged", qos=1, response_topic=response_topic(B))
        refusals.append(caught.value.reason_code)
    arrived = requests.settle(0.3) + answers.settle(0.1)

    # then
    assert refusals == [NOT_AUTHORIZED] * 3, "MQTT v5 PUBACK 0x87, raised as PublishRejectedError"
    assert arrived == [], "neither the workers nor device B get anything"


def test_offload_acl_when_devices_send_requests_a_worker_reads_them_through_the_shared_subscription_and_answers(
    clients: dict[str, MqttClient],
) -> None:
    # given worker-1 serving the group, answering each request on its response topic
    worker = clients[WORKERS[0]]
    requests = Inbox()

    def serve(message: Message) -> None:
        requests(message)
        assert message.response_topic is not None
        worker.publish(message.response_topic, b"outputs", qos=1, wait=False, correlation_data=message.correlation_data)

    worker.subscribe(worker_subscription(DEFAULT_GROUP), serve, qos=1)
    answers = {name: Inbox() for name in (A, B)}
    for name, inbox in answers.items():
        clients[name].subscribe(response_topic(name), inbox, qos=1)

    # when both devices send a request, each under its own prefix
    sent = {name: new_correlation() for name in (A, B)}
    for name, correlation in sent.items():
        clients[name].publish(
            request_topic(name, KEY, "whole"),
            b"frame",
            qos=1,
            response_topic=response_topic(name),
            correlation_data=correlation,
        )
    received = requests.wait_for(2)
    got = {name: inbox.wait_for(1) for name, inbox in answers.items()}

    # then
    assert sorted(m.topic for m in received) == sorted(request_topic(n, KEY, "whole") for n in (A, B)), (
        "the worker reads every device's requests through $share/<group>/edge/+/offload/req/#"
    )
    assert all(m.response_topic == response_topic(m.topic.split("/")[1]) for m in received), (
        "each request carries its device's own response topic"
    )
    assert {name: [(m.payload, m.correlation_data) for m in msgs] for name, msgs in got.items()} == {
        name: [(b"outputs", correlation)] for name, correlation in sent.items()
    }, "the worker may answer on each device's response topic, and each device gets its own answer"


def test_offload_acl_when_a_device_or_another_worker_writes_a_load_report_is_refused(
    fleet: OffloadFleet, clients: dict[str, MqttClient]
) -> None:
    # given everybody watching the load reports
    reports = Inbox()
    clients["operator"].subscribe(f"{LOAD_ROOT}/#", reports, qos=1)

    # when device A fakes reports (a worker's, its own name's) and worker-1 writes worker-2's
    refusals = []
    with MqttClient(fleet.worker(WORKERS[1])) as worker_2:  # worker-2 exists: its report is not just unknown
        for client, topic in (
            (clients[A], load_topic(WORKERS[0])),
            (clients[A], load_topic(A)),
            (clients[WORKERS[0]], load_topic(WORKERS[1])),
        ):
            with pytest.raises(PublishRejectedError) as caught:
                client.publish(topic, b'{"queue": 0}', qos=1, retain=True)
            refusals.append(caught.value.reason_code)
        own = worker_2.publish(load_topic(WORKERS[1]), b'{"queue": 3}', qos=1, retain=True)
    seen = reports.settle(0.3)

    # then
    assert refusals == [NOT_AUTHORIZED] * 3, "only a worker writes a load report, and only its own"
    assert own.acknowledged and [(m.topic, m.payload) for m in seen] == [(load_topic(WORKERS[1]), b'{"queue": 3}')]


def test_offload_acl_when_a_worker_reports_its_load_everybody_reads_it_and_its_will_clears_it(
    fleet: OffloadFleet, clients: dict[str, MqttClient]
) -> None:
    # given worker-2 connected with a retained empty last will on its load topic, as workers connect
    will = Will(topic=load_topic(WORKERS[1]), payload="", qos=1, retain=True)
    worker = MqttClient(fleet.worker(WORKERS[1], will=will, keepalive_s=5))
    worker.connect()
    worker.publish(load_topic(WORKERS[1]), b'{"queue": 1}', qos=1, retain=True)

    # when devices A and B and the operator subscribe afterwards, and then the worker dies
    inboxes = {name: Inbox() for name in (A, B, "operator")}
    for name, inbox in inboxes.items():
        clients[name].subscribe(f"{LOAD_ROOT}/+", inbox, qos=1)
    retained = {name: inbox.wait_for(1) for name, inbox in inboxes.items()}
    raw = worker._paho.socket() if worker._paho is not None else None  # the only way to cut the wire
    assert raw is not None, "the connected worker has a socket"
    raw.shutdown(socket.SHUT_RDWR)
    cleared = {name: inbox.wait_for(2) for name, inbox in inboxes.items()}
    worker.disconnect()

    # then
    for name in inboxes:
        assert [(m.payload, m.retain) for m in retained[name]] == [(b'{"queue": 1}', True)], (
            f"{name} reads the retained report"
        )
        assert [m.payload for m in cleared[name]] == [b'{"queue": 1}', b""], f"{name} sees the will clear it"


def test_offload_acl_when_a_device_joins_the_worker_group_reads_no_request_but_the_ones_it_is_handed_are_lost(
    clients: dict[str, MqttClient],
) -> None:
    # given worker-1 in the group, and device B joining the same group (Mosquitto grants any SUBSCRIBE)
    served, stolen = Inbox(), Inbox()
    clients[WORKERS[0]].subscribe(worker_subscription(), served, qos=1)
    granted = clients[B].subscribe(worker_subscription(), stolen, qos=1)

    # when device A sends six requests
    for index in range(6):
        clients[A].publish(request_topic(A, KEY, "whole"), str(index), qos=1, response_topic=response_topic(A))
    reached = served.wait_for(3)
    leaked = stolen.settle(0.4)

    # then: Mosquitto 2.0 checks "read" at delivery against the real topic, after it picked the member
    assert granted == 1 and leaked == [], "B is in the group but reads no request"
    assert [m.payload for m in served.settle(0.1)] == [m.payload for m in reached] == [b"0", b"2", b"4"], (
        "the requests handed to B in turn are dropped, not passed on (deploy/mosquitto/README.md, 'Cloud offload')"
    )
