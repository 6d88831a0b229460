"""MQTT v5 shared subscriptions (`$share/<group>/<filter>`) through MqttClient, on a real Mosquitto."""

from __future__ import annotations

from edge_sdk.mqtt import MqttClient
from tests.support.clients import Inbox
from tests.support.waits import wait_until
from tools.harness.broker import BrokerFactory


def test_a_shared_subscription_hands_each_message_to_one_member_of_the_group(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    broker = start_broker()
    inboxes = [Inbox(), Inbox()]
    members = [MqttClient(broker.settings(client_id=f"member{i}")) for i in range(2)]
    publisher = MqttClient(broker.settings(client_id="publisher"))
    try:
        for member, inbox in zip(members, inboxes, strict=True):
            member.connect()
            member.subscribe(f"$share/workers/{topic_prefix}/jobs/+", inbox)
        publisher.connect()
        for index in range(20):
            publisher.publish(f"{topic_prefix}/jobs/{index}", str(index), qos=1)
        wait_until(lambda: sum(len(inbox.messages) for inbox in inboxes) >= 20, 5, "20 deliveries")
        received = sorted(int(m.text()) for inbox in inboxes for m in inbox.messages)
        assert received == list(range(20)), "each message once, to one member"
        assert all(inbox.messages for inbox in inboxes), "both members got a share"
        assert all(m.topic.startswith(f"{topic_prefix}/jobs/") for inbox in inboxes for m in inbox.messages)
    finally:
        for client in (*members, publisher):
            client.disconnect()
