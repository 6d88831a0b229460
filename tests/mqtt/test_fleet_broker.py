"""deploy/mosquitto as shipped (config, ACL, make_certs.py) on a real Mosquitto: each device reads and writes
only its own topics, operators all of them, and nobody gets in without a certificate from the fleet CA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.core.errors import BrokerError
from edge_sdk.mqtt import (
    ConnectionEvent,
    ConnectionState,
    MqttClient,
    PublishRejectedError,
    TlsHandshakeError,
    TlsSettings,
    Will,
)
from edge_sdk.mqtt.topics import DeviceTopics
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory, FleetBroker, make_certificates, start_fleet_broker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(60)]

NOT_AUTHORIZED = 0x87
A, B = DeviceTopics("cam-a"), DeviceTopics("cam-b")
ALL = DeviceTopics("+")


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=["cam-a", "cam-b"], operators=["operator"])


@pytest.fixture
def operator(fleet: FleetBroker) -> Iterator[MqttClient]:
    with MqttClient(fleet.settings("operator", client_id="operator-console")) as client:
        yield client


def test_fleet_broker_when_device_a_subscribes_to_device_b_commands_and_state_receives_nothing(
    fleet: FleetBroker, operator: MqttClient
) -> None:
    # given device B with its retained presence, listening to its own commands, and a curious device A
    spy, own = Inbox(), Inbox()
    with MqttClient(fleet.settings("cam-b")) as device_b, MqttClient(fleet.settings("cam-a")) as device_a:
        device_b.publish(B.state, b'{"online": true}', qos=1, retain=True)
        device_b.subscribe(B.cmd, own, qos=1)
        for topic_filter in (B.cmd, B.state, ALL.cmd, "edge/#", "#"):
            device_a.subscribe(topic_filter, spy, qos=1)

        # when the operator commands device B
        operator.publish(B.cmd, b'{"name": "ping"}', qos=1)
        delivered = own.wait_for(1)
        leaked = spy.settle(0.5)

    # then
    assert [m.payload for m in delivered] == [b'{"name": "ping"}'], "device B gets its command"
    assert leaked == [], "device A sees neither B's command nor B's retained state, whatever filter it uses"


def test_fleet_broker_when_device_a_publishes_to_device_b_command_topic_is_refused_with_0x87(
    fleet: FleetBroker,
) -> None:
    # given device B listening to its commands
    own = Inbox()
    with MqttClient(fleet.settings("cam-b")) as device_b, MqttClient(fleet.settings("cam-a")) as device_a:
        device_b.subscribe(B.cmd, own, qos=1)

        # when device A tries to command B, or to overwrite B's desired state or presence
        refusals = []
        for topic in (B.cmd, B.desired, B.state, B.resp):
            with pytest.raises(PublishRejectedError) as caught:
                device_a.publish(topic, b'{"name": "deploy"}', qos=1)
            refusals.append(caught.value)
        received = own.settle(0.5)

    # then
    assert all(isinstance(e, BrokerError) and e.reason_code == NOT_AUTHORIZED for e in refusals), (
        "every publish is refused with PUBACK reason code 0x87, raised as a typed error"
    )
    assert B.cmd in str(refusals[0]), "the error names the topic"
    assert received == [], "nothing reaches device B"


def test_fleet_broker_when_a_device_claims_another_device_client_id_cannot_take_over_its_session(
    fleet: FleetBroker, operator: MqttClient
) -> None:
    # given device B online with a persistent session, listening to its commands
    own = Inbox()
    events: list[ConnectionEvent] = []
    with MqttClient(fleet.settings("cam-b", client_id="cam-b", clean_start=False)) as device_b:
        device_b.add_listener(events.append)
        device_b.subscribe(B.cmd, own, qos=1)

        # when device A connects with B's client id and tries to command B
        with MqttClient(fleet.settings("cam-a", client_id="cam-b", clean_start=False)) as impostor:
            with pytest.raises(PublishRejectedError) as caught:
                impostor.publish(B.cmd, b"{}", qos=1)
            own_topic = impostor.publish(A.reported, b"{}", qos=1)
        operator.publish(B.cmd, b'{"name": "ping"}', qos=1)
        received = own.wait_for(1)

    # then
    assert caught.value.reason_code == NOT_AUTHORIZED, "rights follow the certificate, not the client id"
    assert own_topic.acknowledged, "the impostor's own topics still work"
    assert ConnectionState.RECONNECTING not in [e.state for e in events], (
        "device B is not pushed off the broker (the broker uses the certificate's name as client id)"
    )
    assert [m.payload for m in received] == [b'{"name": "ping"}'], "device B still gets its commands"


def test_fleet_broker_when_a_device_uses_its_own_topics_everything_it_needs_works(
    fleet: FleetBroker, operator: MqttClient
) -> None:
    # given an operator watching every device and the device listening to its commands and desired state
    watched, commands = Inbox(), Inbox()
    for topic_filter in (ALL.state, ALL.resp, ALL.reported, ALL.results("#"), ALL.telemetry("#")):
        operator.subscribe(topic_filter, watched, qos=1)
    operator.publish(A.desired, b'{"version": 3}', qos=1, retain=True)
    with MqttClient(fleet.settings("cam-a")) as device:
        device.subscribe(A.cmd, commands, qos=1)
        device.subscribe(A.desired, commands, qos=1)
        device.subscribe(A.artifacts("#"), commands, qos=1)

        # when the device publishes on each of its outgoing topics and the operator sends it a command and a chunk
        outgoing = [A.state, A.resp, A.reported, A.results("demo", "cam0"), A.telemetry("health")]
        results = [device.publish(topic, b"{}", qos=1) for topic in outgoing]
        operator.publish(A.cmd, b'{"name": "ping"}', qos=1, response_topic=A.resp, correlation_data=b"42")
        operator.publish(A.artifacts("model.onnx", "0"), b"chunk", qos=1)
        received = commands.wait_for(3)
        seen = watched.wait_for(len(outgoing))

        # and when it tries to write topics that flow the other way
        wrong_way = []
        for topic in (A.cmd, A.desired, A.artifacts("x")):
            with pytest.raises(PublishRejectedError) as caught:
                device.publish(topic, b"{}", qos=1)
            wrong_way.append(caught.value.reason_code)

    # then
    assert all(r.acknowledged for r in results), "state, resp, reported, results and telemetry are accepted"
    assert sorted(m.topic for m in seen) == sorted(outgoing), "the operator receives all of them"
    by_topic = {m.topic: m for m in received}
    assert by_topic[A.desired].retain, "the retained desired state reaches the device when it subscribes"
    assert by_topic[A.cmd].correlation_data == b"42" and by_topic[A.cmd].response_topic == A.resp, (
        "commands carry the MQTT v5 response topic and correlation data"
    )
    assert A.artifacts("model.onnx", "0") in by_topic, "artifact chunks reach the device"
    assert wrong_way == [NOT_AUTHORIZED] * 3, "a device cannot write its own commands, desired state or artifacts"


def test_fleet_broker_when_a_device_vanishes_its_last_will_marks_it_offline(
    fleet: FleetBroker, operator: MqttClient
) -> None:
    # given a device whose last will is a retained "offline" on its state topic
    presence = Inbox()
    operator.subscribe(A.state, presence, qos=1)
    will = Will(topic=A.state, payload='{"online": false}', qos=1, retain=True)
    device = MqttClient(fleet.settings("cam-a", will=will, keepalive_s=5))
    device.connect()
    device.publish(A.state, b'{"online": true}', qos=1, retain=True)

    # when its connection dies without a DISCONNECT
    raw = device._paho.socket() if device._paho is not None else None
    assert raw is not None, "the connected client has a socket"
    raw.close()
    received = presence.wait_for(2, timeout=20)
    device.disconnect()

    # then
    assert [m.payload for m in received] == [b'{"online": true}', b'{"online": false}'], (
        "the ACL lets the broker publish the device's will on its own state topic"
    )


def test_fleet_broker_when_the_operator_commands_any_device_and_reads_everything_it_works(
    fleet: FleetBroker, operator: MqttClient
) -> None:
    # given two devices listening to their commands, both reporting
    inboxes = {name: Inbox() for name in ("cam-a", "cam-b")}
    everything = Inbox()
    operator.subscribe("edge/#", everything, qos=1)
    with MqttClient(fleet.settings("cam-a")) as device_a, MqttClient(fleet.settings("cam-b")) as device_b:
        for device, topics, name in ((device_a, A, "cam-a"), (device_b, B, "cam-b")):
            device.subscribe(topics.cmd, inboxes[name], qos=1)
            device.publish(topics.reported, name, qos=1, retain=True)

        # when the operator writes each device's command, desired state and an artifact chunk
        for topics in (A, B):
            for topic in (topics.cmd, topics.desired, topics.artifacts("m", "0")):
                operator.publish(topic, b"{}", qos=1)
        got_a, got_b = inboxes["cam-a"].wait_for(1), inboxes["cam-b"].wait_for(1)
        seen = {m.topic for m in everything.wait_for(8)}

    # then
    assert [m.topic for m in got_a] == [A.cmd] and [m.topic for m in got_b] == [B.cmd], "each device got its command"
    assert {A.reported, B.reported, A.cmd, B.desired, B.artifacts("m", "0")} <= seen, (
        "the operator reads every device's topics, including what it wrote itself"
    )


def test_fleet_broker_when_a_client_has_no_certificate_is_refused_at_the_tls_handshake(fleet: FleetBroker) -> None:
    # given / when
    client = MqttClient(fleet.settings(None))
    with pytest.raises(TlsHandshakeError) as caught:
        client.connect()

    # then
    assert "client certificate" in str(caught.value), "the message points at the missing client certificate"
    assert client.state is ConnectionState.CLOSED, "nothing keeps retrying"


def test_fleet_broker_when_the_client_certificate_is_from_another_ca_is_refused(
    fleet: FleetBroker, tmp_path: Path
) -> None:
    # given a certificate named like a real device but signed by a stranger's CA
    stranger = make_certificates(tmp_path / "stranger", client_name="cam-a")
    tls = TlsSettings(ca_file=fleet.etc_dir / "ca.pem", cert_file=stranger.client_cert, key_file=stranger.client_key)

    # when / then
    with pytest.raises(TlsHandshakeError):
        MqttClient(fleet.broker.settings(tls=tls)).connect()
