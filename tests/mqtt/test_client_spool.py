"""MqttClient with a disk spool against a private Mosquitto: messages published while the broker is down
are delivered after it comes back, in order, across a restart of the publishing process, within the bound."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.mqtt import ConnectionState, Message, MqttClient, SpooledMessage, SpoolSettings
from edge_sdk.mqtt.publishing import Publisher
from edge_sdk.mqtt.spool import DiskSpool
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory, MosquittoBroker

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOMY = "max_queued_messages 100000\nmax_inflight_messages 100\n"
"""Mosquitto keeps at most 1,000 messages for an offline persistent session by default; these tests send more."""


def numbers(messages: list[Message]) -> list[int]:
    return [int(m.payload) for m in messages]


def spooling_client(broker: MosquittoBroker, path: Path, **spool: int) -> MqttClient:
    return MqttClient(broker.settings(spool=SpoolSettings(path=path, **spool)))


def stop_and_wait(broker: MosquittoBroker, *clients: MqttClient) -> None:
    broker.stop()
    for client in clients:
        assert client.wait_for_state(ConnectionState.RECONNECTING, timeout=10), "the client noticed the broker left"


def test_mqtt_client_with_spool_when_1000_are_published_while_the_broker_is_down_delivers_all_in_order(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given a persistent subscriber session and a publisher with a spool, both connected
    broker = start_broker(persistence=True, extra_config=ROOMY)
    inbox = Inbox()
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    publisher = spooling_client(broker, tmp_path / "spool.db")
    with subscriber, publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        stop_and_wait(broker, subscriber, publisher)

        # when 1,000 results are published while the broker is down, and it comes back
        results = [publisher.publish(f"{topic_prefix}/results", str(i), qos=1) for i in range(1000)]
        waiting = publisher.spool_stats
        broker.start()
        received = inbox.wait_for(1000, timeout=60)
        drained = publisher.flush(30)
        after = publisher.spool_stats

    # then
    assert all(r.spooled and not r.acknowledged for r in results), "publishes while the broker is away are spooled"
    assert waiting is not None and waiting.messages == 1000, "all 1,000 wait in the spool"
    assert numbers(received) == list(range(1000)), "every message arrives, in publish order, once"
    assert drained, "the spool drains once the broker is back"
    assert after is not None and after.messages == 0, "delivered messages are removed from the spool"


def test_mqtt_client_with_spool_when_publishing_during_the_replay_no_live_message_overtakes_a_spooled_one(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given 500 spooled messages waiting for the broker
    broker = start_broker(persistence=True, extra_config=ROOMY)
    inbox = Inbox()
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    publisher = spooling_client(broker, tmp_path / "spool.db")
    with subscriber, publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        stop_and_wait(broker, subscriber, publisher)
        for i in range(500):
            publisher.publish(f"{topic_prefix}/results", str(i), qos=1)

        # when the broker comes back and the application keeps publishing while the spool is replayed
        def keep_publishing() -> None:
            for i in range(500, 1000):
                publisher.publish(f"{topic_prefix}/results", str(i), qos=1, wait=False)

        broker.start()
        publisher.wait_for_state(ConnectionState.CONNECTED, timeout=20)
        writer = threading.Thread(target=keep_publishing)
        writer.start()
        writer.join(timeout=60)
        received = inbox.wait_for(1000, timeout=60)

    # then
    assert numbers(received) == list(range(1000)), "live publishes queue up behind the spooled ones"


def test_mqtt_client_with_spool_when_the_process_is_killed_while_messages_wait_delivers_them_after_its_restart(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given a device process that spooled 300 results while its broker was down, then was killed (SIGKILL)
    broker = start_broker()
    broker.stop()
    path = tmp_path / "spool" / "agent.db"
    settings = broker.settings(spool=SpoolSettings(path=path))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.mqtt.spool_child", settings.model_dump_json(), f"{topic_prefix}/r", "300"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
    finally:
        child.kill()
        child.wait(timeout=10)
    assert line.strip() == "spooled 300", f"the device process spooled everything before it died, said {line!r}"

    # the spool the killed process left holds every result (read before a client reopens it: a client
    # starts sending at once, and on a busy machine a read after its start found 40 already sent)
    with DiskSpool(path) as left_behind:
        waiting = left_behind.stats()

    # when the broker is back, a subscriber listens, and the device process starts again on the same spool
    broker.start()
    inbox = Inbox()
    with MqttClient(broker.settings()) as subscriber:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        with MqttClient(settings) as restarted:
            received = inbox.wait_for(300, timeout=60)
            restarted.flush(30)
            left = restarted.spool_stats

    # then
    assert waiting.messages == 300, "the killed process's spool holds the 300 results"
    assert numbers(received) == list(range(300)), "all of them arrive, in order"
    assert left is not None and left.messages == 0, "and leave the spool once acknowledged"


def test_mqtt_client_with_spool_when_the_bound_is_reached_evicts_the_oldest_and_reports_the_count(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given a spool bounded to 50 messages
    broker = start_broker(persistence=True, extra_config=ROOMY)
    inbox = Inbox()
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    publisher = spooling_client(broker, tmp_path / "spool.db", max_messages=50)
    with subscriber, publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        stop_and_wait(broker, subscriber, publisher)

        # when 80 are published during the outage
        for i in range(80):
            publisher.publish(f"{topic_prefix}/results", str(i), qos=1)
        during = publisher.spool_stats
        broker.start()
        received = inbox.wait_for(50, timeout=60)
        everything = inbox.settle(0.5)
    after = publisher.spool_stats

    # then
    assert during is not None and (during.messages, during.evicted) == (50, 30), "30 oldest evicted, 50 kept"
    assert numbers(received) == list(range(30, 80)), "the newest 50 arrive in order"
    assert len(everything) == 50, "evicted messages are gone for good"
    assert after is not None and after.evicted == 30, "the eviction count is still reported after the client closed"


def test_mqtt_client_with_spool_when_the_spool_file_is_corrupt_keeps_working_with_a_fresh_one(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a spool file that was damaged while the device was off
    broker = start_broker(persistence=True, extra_config=ROOMY)
    path = tmp_path / "spool.db"
    path.write_bytes(b"\x00garbage" * 1000)
    inbox = Inbox()
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    publisher = spooling_client(broker, path)

    # when the client starts, and later spools through an outage
    with caplog.at_level(logging.ERROR, logger="edge_sdk.mqtt"), subscriber:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        with publisher:
            stats = publisher.spool_stats
            stop_and_wait(broker, subscriber, publisher)
            for i in range(20):
                publisher.publish(f"{topic_prefix}/results", str(i), qos=1)
            broker.start()
            received = inbox.wait_for(20, timeout=30)

    # then
    assert stats is not None and stats.quarantined is not None, "the client reports that the spool was replaced"
    assert stats.quarantined.read_bytes() == b"\x00garbage" * 1000, "the bad file is moved aside, not deleted"
    assert any("corrupt" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records), (
        "a clear error is logged"
    )
    assert numbers(received) == list(range(20)), "the fresh spool carries the client through the next outage"


def test_mqtt_client_with_spool_when_the_broker_restarts_mid_replay_loses_nothing_and_keeps_order(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given 2,000 spooled messages, a persistent subscriber, and a count of what the spool hands to paho
    handed: list[int] = []
    hand_over = Publisher.hand_over

    def counting(self: Publisher, client: Any, message: SpooledMessage) -> int | None:
        mid = hand_over(self, client, message)
        if mid is not None:
            handed.append(message.id)
        return mid

    monkeypatch.setattr(Publisher, "hand_over", counting)
    broker = start_broker(persistence=True, extra_config=ROOMY)
    inbox = Inbox()
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    publisher = spooling_client(broker, tmp_path / "spool.db")
    with subscriber, publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        stop_and_wait(broker, subscriber, publisher)
        for i in range(2000):
            publisher.publish(f"{topic_prefix}/results", str(i), qos=1)

        # when the broker goes away again while the spool is being replayed
        broker.start()
        inbox.wait_for(300, timeout=30)
        broker.restart()
        drained = publisher.flush(60)
        everything = inbox.settle(1.0)

    # then
    first_seen = list(dict.fromkeys(numbers(everything)))
    assert first_seen == list(range(2000)), "every message arrives, first copies in publish order"
    assert drained, "the spool drains after the second restart"
    assert len(handed) == len(set(handed)) == 2000, (
        "each spooled message is handed to paho once; any duplicate is a QoS 1 resend of an unacknowledged one"
    )


def test_mqtt_client_with_spool_when_the_broker_stalls_the_overflow_of_max_queued_waits_in_the_spool_in_order(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given a publisher holding at most 10 messages in memory, and a broker that stops answering
    broker = start_broker(extra_config=ROOMY)
    inbox = Inbox()
    publisher = MqttClient(broker.settings(spool=SpoolSettings(path=tmp_path / "spool.db")), max_queued=10)
    with MqttClient(broker.settings()) as subscriber, publisher:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        broker.pause()

        # when 300 are published while it is stalled, then it recovers
        results = [publisher.publish(f"{topic_prefix}/r", str(i), qos=1, wait=False) for i in range(300)]
        broker.resume()
        received = inbox.wait_for(300, timeout=60)

    # then
    spooled = [r.spooled for r in results]
    assert spooled[:10] == [False] * 10 and all(spooled[10:]), "beyond max_queued, messages go to the spool"
    assert numbers(received) == list(range(300)), "nothing is dropped and the order holds"


def test_mqtt_client_with_spool_when_connected_and_nothing_waits_publishes_live_and_waits_for_the_ack(
    start_broker: BrokerFactory, topic_prefix: str, tmp_path: Path
) -> None:
    # given
    broker = start_broker()

    # when
    with spooling_client(broker, tmp_path / "spool.db") as client:
        result = client.publish(f"{topic_prefix}/x", b"live", qos=1)
        qos0 = client.publish(f"{topic_prefix}/y", b"live", qos=0)

    # then
    assert result.acknowledged and not result.spooled, "with an empty spool, publishes go straight to the broker"
    assert not qos0.spooled, "QoS 0 too"
