"""Disk spool: results published while the broker is down, delivered after it comes back.

Usage: python tools/bench/spool.py [--messages 10000] [--payload 300]

A private Mosquitto (tools/harness/broker.py) with persistence; a subscriber with a persistent session
counts what arrives. For each scenario the broker is stopped, the publisher (an MqttClient with a
disk spool) publishes --messages JSON results of about --payload bytes at QoS 1, the broker is
started again and the clock runs until every result has arrived. Scenarios: a plain outage; the
same with `durable: true` (fsync per spooled message); the broker restarted again in the middle of
the replay; the publishing process "restarted" (client closed and reopened on the same spool)
before the broker returns. Prints a markdown table: spool write rate, spool size on disk at the
peak, reconnect and drain time, drain rate, and whether everything arrived in order, with how many
duplicates (QoS 1 may resend what was not acknowledged when a connection broke).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edge_sdk.mqtt import ConnectionState, Message, MqttClient, SpoolSettings
from tools.harness.broker import MosquittoBroker, find_mosquitto

TOPIC = "bench/spool/results"


class Counter:
    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.sequence: list[int] = []
        self.unique: set[int] = set()

    def __call__(self, message: Message) -> None:
        seq = json.loads(message.payload)["frame"]["index"]
        with self.condition:
            self.sequence.append(seq)
            self.unique.add(seq)
            self.condition.notify_all()

    def wait_unique(self, count: int, timeout: float) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: len(self.unique) >= count, timeout)

    def wait_count(self, count: int, timeout: float) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: len(self.sequence) >= count, timeout)


@dataclass
class Row:
    scenario: str
    messages: int
    write_rate: float
    peak_disk: int
    reconnect_s: float
    drain_s: float
    delivered: int
    in_order: bool
    duplicates: int
    lost: int

    def markdown(self) -> str:
        drain_rate = self.messages / self.drain_s if self.drain_s else 0.0
        return (
            f"| {self.scenario} | {self.messages:,} | {self.write_rate:,.0f} | {self.peak_disk / 2**20:.1f} MiB "
            f"| {self.reconnect_s:.2f} | {self.drain_s:.2f} | {drain_rate:,.0f} | {self.delivered:,} "
            f"| {'yes' if self.in_order else 'NO'} | {self.duplicates} | {self.lost} |"
        )


def result_payload(index: int, size: int) -> str:
    body = {
        "frame": {"source": "cam0", "index": index, "timestamp": 1_700_000_000.0 + index / 30},
        "detections": [{"label": "person", "score": 0.87, "box": [10.0, 20.0, 60.0, 110.0]}],
        "pad": "",
    }
    text = json.dumps(body)
    body["pad"] = "x" * max(0, size - len(text))
    return json.dumps(body)


def run(
    folder: Path, name: str, messages: int, payload: int, durable: bool, restart_broker: bool, restart_client: bool
) -> Row:
    broker = MosquittoBroker(
        folder / name, persistence=True, extra_config="max_queued_messages 1000000\nmax_inflight_messages 100\n"
    ).start()
    counter = Counter()
    spool_path = folder / name / "spool.db"
    settings = broker.settings(spool=SpoolSettings(path=spool_path, durable=durable), publish_timeout_s=30)
    subscriber = MqttClient(broker.settings(client_id=f"bench-sub-{name}", clean_start=False))
    publisher = MqttClient(settings)
    try:
        subscriber.connect()
        subscriber.subscribe(f"{TOPIC}/#", counter, qos=1)
        publisher.connect()
        broker.stop()
        publisher.wait_for_state(ConnectionState.RECONNECTING, 10)
        subscriber.wait_for_state(ConnectionState.RECONNECTING, 10)

        bodies = [result_payload(i, payload) for i in range(messages)]
        started = time.perf_counter()
        for body in bodies:
            publisher.publish(TOPIC, body, qos=1, wait=False)
        write_rate = messages / (time.perf_counter() - started)
        stats = publisher.spool_stats
        peak_disk = stats.file_bytes if stats else 0
        if restart_client:
            publisher.disconnect()
            publisher = MqttClient(settings)
            publisher.start()

        back = time.perf_counter()
        broker.start()
        publisher.wait_for_state(ConnectionState.CONNECTED, 60)
        reconnect_s = time.perf_counter() - back
        if restart_broker:
            counter.wait_count(messages // 3, 120)
            broker.restart()
        counter.wait_unique(messages, 600)
        drain_s = time.perf_counter() - back - reconnect_s
        publisher.flush(60)
        time.sleep(0.5)  # late duplicates
        with counter.condition:
            sequence = list(counter.sequence)
        first_seen = list(dict.fromkeys(sequence))
        return Row(
            scenario=name,
            messages=messages,
            write_rate=write_rate,
            peak_disk=peak_disk,
            reconnect_s=reconnect_s,
            drain_s=drain_s,
            delivered=len(first_seen),
            in_order=first_seen == list(range(messages)),
            duplicates=len(sequence) - len(first_seen),
            lost=messages - len(first_seen),
        )
    finally:
        publisher.disconnect()
        subscriber.disconnect()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--payload", type=int, default=300, help="approximate JSON result size in bytes")
    args = parser.parse_args()
    if find_mosquitto() is None:
        raise SystemExit("needs the mosquitto binary (apt-get install mosquitto)")
    scenarios = [
        ("outage", False, False, False),
        ("outage, durable (fsync)", True, False, False),
        ("broker restarted mid-replay", False, True, False),
        ("publisher restarted during outage", False, False, True),
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-spool-bench-", dir=Path.home()) as tmp:
        for index, (name, durable, restart_broker, restart_client) in enumerate(scenarios):
            rows.append(
                run(Path(tmp), f"s{index}", args.messages, args.payload, durable, restart_broker, restart_client)
            )
            rows[-1].scenario = name
    print(f"{args.messages:,} QoS 1 results of ~{args.payload} bytes, Mosquitto on 127.0.0.1, spool on local disk\n")
    print(
        "| scenario | results | spool write (msg/s) | spool on disk (peak) | reconnect (s) | drain (s) "
        "| drain (msg/s) | delivered | in order | duplicates | lost |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row.markdown())


if __name__ == "__main__":
    main()
