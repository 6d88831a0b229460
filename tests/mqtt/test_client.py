"""MqttClient against a private Mosquitto: plain and TLS connects, refusals with reason codes, ACLs,
subscribe round trips, and reconnecting after the broker restarts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from edge_sdk.core.errors import BrokerError
from edge_sdk.mqtt import (
    BrokerUnreachableError,
    ConnectionEvent,
    ConnectionState,
    ConnectRefusedError,
    MqttClient,
    MqttProtocol,
    MqttSettings,
    PublishRejectedError,
    TlsHandshakeError,
    TlsSettings,
    Will,
)
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory, free_port, make_certificates

pytestmark = [pytest.mark.broker, pytest.mark.timeout(60)]

NOT_AUTHORIZED = 0x87


def acl_allowing(user: str, prefix: str) -> str:
    """An ACL where `user` may use `prefix`/allowed/# and nothing else."""
    return f"user {user}\ntopic readwrite {prefix}/allowed/#\n"


# --- connecting ---------------------------------------------------------------------------------------


def test_mqtt_client_when_broker_is_plain_connects_and_state_is_connected(start_broker: BrokerFactory) -> None:
    # given
    broker = start_broker()
    client = MqttClient(broker.settings())
    events: list[ConnectionEvent] = []
    client.add_listener(events.append)

    # when
    with client:
        connected_state = client.state

    # then
    assert connected_state is ConnectionState.CONNECTED, "connect() returns once the broker accepted the client"
    assert client.state is ConnectionState.CLOSED, "leaving the context disconnects"
    assert [event.state for event in events] == [
        ConnectionState.CONNECTING,
        ConnectionState.CONNECTED,
        ConnectionState.CLOSED,
    ], "listeners see every state change in order"


def test_mqtt_client_when_the_broker_limits_packet_size_says_the_limit_from_its_connack(
    start_broker: BrokerFactory,
) -> None:
    # given a broker that takes packets of at most 65,536 bytes, and one without a limit
    limited = start_broker(extra_config="max_packet_size 65536\n")
    unlimited = start_broker()

    # when clients connect over MQTT v5 and 3.1.1
    before = MqttClient(limited.settings())
    with MqttClient(limited.settings()) as v5, MqttClient(unlimited.settings()) as no_limit:
        seen = v5.max_packet_size, no_limit.max_packet_size
    with MqttClient(limited.settings(protocol=MqttProtocol.V311)) as v311:
        old_protocol = v311.max_packet_size

    # then
    assert before.max_packet_size is None, "nothing is known before the first CONNACK"
    assert seen == (65536, None), "the CONNACK's Maximum Packet Size, None where the broker sets none"
    assert old_protocol is None, "MQTT 3.1.1 has no CONNACK properties"


def test_mqtt_client_when_tls_client_certificate_is_given_connects_and_publishes(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a TLS listener that requires client certificates signed by its CA
    broker = start_broker(tls=True, require_client_cert=True)
    settings = broker.settings(client_cert=True)

    # when
    with MqttClient(settings) as client:
        result = client.publish(f"{topic_prefix}/tls", b"over tls", qos=1)

    # then
    assert settings.tls is not None and settings.tls.verify_hostname, "the broker's certificate and name are checked"
    assert result.acknowledged, "a QoS 1 publish over TLS is acknowledged by the broker"


def test_mqtt_client_when_tls_listener_requires_a_client_certificate_and_none_is_given_raises_tls_error(
    start_broker: BrokerFactory,
) -> None:
    # given
    broker = start_broker(tls=True, require_client_cert=True)
    client = MqttClient(broker.settings(client_cert=False))

    # when
    with pytest.raises(TlsHandshakeError) as caught:
        client.connect()

    # then
    assert isinstance(caught.value, BrokerError), "TLS failures are BrokerErrors like every broker problem"
    assert "TLS" in str(caught.value), "the message says the TLS handshake is what failed"
    assert "client certificate" in str(caught.value), "the message points at the missing client certificate"
    assert client.state is ConnectionState.CLOSED, "a failed connect leaves nothing running"


def test_mqtt_client_when_the_broker_certificate_is_from_an_unknown_ca_raises_tls_error(
    start_broker: BrokerFactory, tmp_path: Path
) -> None:
    # given a client that trusts another CA than the one that signed the broker's certificate
    broker = start_broker(tls=True, require_client_cert=False)
    stranger = make_certificates(tmp_path / "other-ca")
    client = MqttClient(broker.settings(tls=TlsSettings(ca_file=stranger.ca_file)))

    # when
    with pytest.raises(TlsHandshakeError) as caught:
        client.connect()

    # then
    assert "certificate" in str(caught.value), "the message says the broker's certificate was not trusted"
    assert "tls.ca_file" in str(caught.value), "the message says which setting to check"


def test_mqtt_client_when_password_is_wrong_raises_broker_error_not_authorized_with_reason_code(
    start_broker: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broker that knows alice with another password
    broker = start_broker(passwords={"alice": "right-password"})
    monkeypatch.setenv("EDGE_TEST_MQTT_PASSWORD", "wrong-password")
    client = MqttClient(broker.settings(username="alice", password_env="EDGE_TEST_MQTT_PASSWORD"))

    # when
    with pytest.raises(ConnectRefusedError) as caught:
        client.connect()

    # then
    assert isinstance(caught.value, BrokerError), "a refused CONNECT is a BrokerError"
    assert caught.value.reason_code == NOT_AUTHORIZED, "the error carries the broker's CONNACK reason code (0x87)"
    assert "not authorized" in str(caught.value).lower(), "the message says the broker did not authorise the client"
    assert "0x87" in str(caught.value), "the message shows the reason code"
    assert client.state is ConnectionState.CLOSED, "a refused client does not keep retrying in the background"


def test_mqtt_client_when_password_file_holds_the_right_password_connects(
    start_broker: BrokerFactory, tmp_path: Path
) -> None:
    # given the password in a file, with the trailing newline editors add
    broker = start_broker(passwords={"alice": "right-password"})
    password_file = tmp_path / "mqtt-password"
    password_file.write_text("right-password\n")
    client = MqttClient(broker.settings(username="alice", password_file=password_file))

    # when
    client.connect()
    try:
        state = client.state
    finally:
        client.disconnect()

    # then
    assert state is ConnectionState.CONNECTED, "the password is read from the file at connect time"


def test_mqtt_client_when_nothing_listens_raises_broker_unreachable() -> None:
    # given a port nobody listens on
    client = MqttClient(MqttSettings(host="127.0.0.1", port=free_port(), connect_timeout_s=5.0))

    # when
    with pytest.raises(BrokerUnreachableError) as caught:
        client.connect()

    # then
    assert "refused" in str(caught.value), "the message says the connection was refused"
    assert caught.value.reason_code is None, "no broker answered, so there is no MQTT reason code"
    assert client.state is ConnectionState.CLOSED, "nothing keeps running after a failed connect"


# --- publish and subscribe ----------------------------------------------------------------------------


@pytest.fixture
def alice(start_broker: BrokerFactory, topic_prefix: str, monkeypatch: pytest.MonkeyPatch) -> MqttSettings:
    """MQTT v5 settings of alice, who may only write below <prefix>/allowed."""
    broker = start_broker(passwords={"alice": "pw"}, acl=acl_allowing("alice", topic_prefix))
    monkeypatch.setenv("EDGE_TEST_MQTT_PASSWORD", "pw")
    return broker.settings(username="alice", password_env="EDGE_TEST_MQTT_PASSWORD", protocol=MqttProtocol.V5)


def test_mqtt_client_when_v5_publish_goes_to_an_acl_forbidden_topic_raises_with_reason_code_0x87(
    alice: MqttSettings, topic_prefix: str
) -> None:
    # given alice may only write below <prefix>/allowed
    with MqttClient(alice) as client:
        allowed = client.publish(f"{topic_prefix}/allowed/x", b"ok", qos=1)

        # when
        with pytest.raises(PublishRejectedError) as caught:
            client.publish(f"{topic_prefix}/forbidden/x", b"nope", qos=1)
        rejected_count = client.rejected_publishes

    # then
    assert allowed.acknowledged and not allowed.reason_code & 0x80, "a permitted topic is acknowledged as success"
    assert isinstance(caught.value, BrokerError), "a rejected publish is a BrokerError"
    assert caught.value.reason_code == NOT_AUTHORIZED, "the PUBACK reason code 0x87 reaches the caller"
    assert "forbidden/x" in str(caught.value), "the message names the topic"
    assert rejected_count == 1, "rejections are counted"


def test_tracked_publishes_go_out_together_in_order_and_each_is_acknowledged_or_refused_in_turn(
    alice: MqttSettings, topic_prefix: str
) -> None:
    # given alice may only write below <prefix>/allowed, and a subscriber there
    inbox = Inbox()
    with MqttClient(alice) as client:
        client.subscribe(f"{topic_prefix}/allowed/#", inbox, qos=1)
        # when five messages are handed over before any acknowledgement is waited for, the third forbidden
        topics = [f"{topic_prefix}/{'forbidden' if n == 2 else 'allowed'}/{n}" for n in range(5)]
        pending = [client.publish_tracked(topic, str(n).encode()) for n, topic in enumerate(topics)]
        outcomes: list[object] = []
        for each in pending:
            try:
                outcomes.append(each.wait(5).acknowledged)
            except PublishRejectedError as refused:
                outcomes.append(refused.reason_code)
        inbox.wait_for(4)
    # then each has its own outcome, and the permitted ones arrive in the order they were handed over
    assert outcomes == [True, True, NOT_AUTHORIZED, True, True]
    assert [message.payload for message in inbox.messages] == [b"0", b"1", b"3", b"4"]


def test_mqtt_client_when_v311_publish_goes_to_an_acl_forbidden_topic_is_not_delivered_and_not_reported(
    start_broker: BrokerFactory, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the same ACL, a 3.1.1 publisher and a subscriber allowed to read everything
    acl = acl_allowing("alice", topic_prefix) + f"user watcher\ntopic read {topic_prefix}/#\n"
    broker = start_broker(passwords={"alice": "pw", "watcher": "pw"}, acl=acl)
    monkeypatch.setenv("EDGE_TEST_MQTT_PASSWORD", "pw")
    publisher = broker.settings(username="alice", password_env="EDGE_TEST_MQTT_PASSWORD", protocol=MqttProtocol.V311)
    watcher = broker.settings(username="watcher", password_env="EDGE_TEST_MQTT_PASSWORD")
    inbox = Inbox()

    with MqttClient(watcher) as subscriber, MqttClient(publisher) as client:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)

        # when
        forbidden = client.publish(f"{topic_prefix}/forbidden/x", b"nope", qos=1)
        client.publish(f"{topic_prefix}/allowed/x", b"ok", qos=1)
        received = inbox.wait_for(1)
        received_after = inbox.settle()

    # then
    assert forbidden.acknowledged, "MQTT 3.1.1 has no failure code in PUBACK: the broker acknowledges and drops"
    assert [m.topic for m in received_after] == [f"{topic_prefix}/allowed/x"], "only the permitted message arrives"
    assert received[0].payload == b"ok", "the permitted message arrives intact"


def test_mqtt_client_when_subscribed_receives_what_another_client_publishes(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given
    broker = start_broker()
    inbox = Inbox()

    with MqttClient(broker.settings()) as subscriber, MqttClient(broker.settings()) as publisher:
        granted = subscriber.subscribe(f"{topic_prefix}/+/status", inbox, qos=2)

        # when
        publisher.publish(f"{topic_prefix}/cam1/status", b'{"ok": true}', qos=2)
        publisher.publish(f"{topic_prefix}/cam2/other", b"not matching", qos=2)
        publisher.publish(f"{topic_prefix}/cam2/status", "text payload", qos=1)
        received = inbox.wait_for(2)
        everything = inbox.settle()

    # then
    assert granted == 2, "the broker grants the requested QoS"
    by_topic = {m.topic: m for m in received}  # QoS 1 and QoS 2 flows may overtake each other
    assert sorted(by_topic) == [f"{topic_prefix}/cam1/status", f"{topic_prefix}/cam2/status"], (
        "messages matching the wildcard arrive"
    )
    assert len(everything) == 2, "a message not matching the filter is not delivered to the handler"
    first = by_topic[f"{topic_prefix}/cam1/status"]
    assert first.payload == b'{"ok": true}' and first.qos == 2, "payload and QoS arrive unchanged"
    assert by_topic[f"{topic_prefix}/cam2/status"].text() == "text payload", "str payloads are sent as UTF-8"


def test_mqtt_client_when_broker_restarts_mid_stream_reconnects_and_later_publishes_arrive(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a publisher and a subscriber with fresh sessions, both connected
    broker = start_broker()
    inbox = Inbox()
    publisher_events: list[ConnectionEvent] = []
    with MqttClient(broker.settings()) as subscriber, MqttClient(broker.settings()) as publisher:
        publisher.add_listener(publisher_events.append)
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        publisher.publish(f"{topic_prefix}/before", b"1", qos=1)
        assert inbox.wait_for(1), "the stream works before the restart"

        # when the broker goes away and comes back on the same port
        broker.restart()
        publisher_back = publisher.wait_for_state(ConnectionState.CONNECTED, timeout=20)
        subscriber_back = subscriber.wait_for_state(ConnectionState.CONNECTED, timeout=20)
        # a reconnect may be under way when the states are read; wait until both have come back at least once
        publisher.publish(f"{topic_prefix}/after", b"2", qos=1, wait=10.0)
        received = inbox.wait_for(2)

    # then
    assert publisher_back and subscriber_back, "both clients reconnect by themselves"
    assert publisher.connects >= 2 and subscriber.connects >= 2, "each client connected again after the restart"
    assert ConnectionState.RECONNECTING in [e.state for e in publisher_events], "listeners saw the connection drop"
    assert [m.topic for m in received] == [f"{topic_prefix}/before", f"{topic_prefix}/after"], (
        "the subscription is renewed after the reconnect, so later publishes arrive"
    )


def test_mqtt_client_when_qos1_is_published_while_broker_is_down_delivers_it_after_the_restart(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a persistent subscriber session on a broker that persists sessions
    broker = start_broker(persistence=True)
    inbox = Inbox()
    subscriber_settings = broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False)
    with MqttClient(subscriber_settings) as subscriber, MqttClient(broker.settings()) as publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        broker.stop()
        assert publisher.wait_for_state(ConnectionState.RECONNECTING, timeout=10), "the publisher notices the loss"

        # when a QoS 1 message is published while the broker is down
        queued = publisher.publish(f"{topic_prefix}/while-down", b"queued", qos=1, wait=False)
        broker.start()
        received = inbox.wait_for(1, timeout=20)

    # then
    assert queued.queued and not queued.acknowledged, "the message is held by the client while the broker is away"
    assert [m.payload for m in received] == [b"queued"], "the held message reaches the subscriber after the restart"


def test_mqtt_client_when_it_vanishes_without_disconnecting_the_broker_publishes_its_will(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a client with a retained "offline" will
    broker = start_broker()
    will = Will(topic=f"{topic_prefix}/status", payload="offline", qos=1, retain=True)
    inbox = Inbox()
    with MqttClient(broker.settings()) as watcher:
        watcher.subscribe(f"{topic_prefix}/status", inbox, qos=1)
        client = MqttClient(broker.settings(will=will, keepalive_s=5))
        client.connect()

        # when its network connection dies (no DISCONNECT is sent)
        raw = client._paho.socket() if client._paho is not None else None  # the only way to cut the wire
        assert raw is not None, "the connected client has a socket"
        raw.shutdown(socket.SHUT_RDWR)
        received = inbox.wait_for(1, timeout=15)
        client.disconnect()

    # then
    assert [(m.text(), m.retain) for m in received] == [("offline", False)], "the broker published the will"
