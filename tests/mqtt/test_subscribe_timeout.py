"""A subscription whose SUBACK does not come in time is kept: the caller hears of it, messages still flow."""

from __future__ import annotations

import pytest

from edge_sdk.mqtt import AckTimeoutError, ConnectionState, MqttClient
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory

pytestmark = pytest.mark.broker


def test_mqtt_client_when_subscribe_ack_times_out_keeps_the_subscription_across_a_restart(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a connected subscriber and a broker that stalls (SIGSTOP) before it answers a SUBSCRIBE
    broker = start_broker()
    inbox = Inbox()
    with MqttClient(broker.settings()) as subscriber, MqttClient(broker.settings()) as publisher:
        broker.pause()
        try:
            # when the subscription is not acknowledged in time
            with pytest.raises(AckTimeoutError):
                subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1, timeout=0.5)
        finally:
            broker.resume()
        # and the broker then goes away and comes back without the client's session
        broker.restart()
        assert subscriber.wait_for_state(ConnectionState.CONNECTED, timeout=20), "the subscriber reconnects"
        assert publisher.wait_for_state(ConnectionState.CONNECTED, timeout=20), "the publisher reconnects"
        publisher.publish(f"{topic_prefix}/after", b"1", qos=1, wait=10.0)
        received = inbox.wait_for(1, timeout=20)

    # then the subscription was kept and renewed: the message arrives
    assert [m.topic for m in received] == [f"{topic_prefix}/after"], "a timed-out subscription must not be lost"
