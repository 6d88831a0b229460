"""The agent's results forwarder: outbox order, deletion only after the client accepted, evictions reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edge_sdk.fleet.device.results_forwarder import ResultForwarder
from edge_sdk.mqtt import MqttSettings, NotConnectedError, PublishRejectedError
from edge_sdk.mqtt.publishing import Payload
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.sinks.agent import ResultsOutbox


class FakeClient:
    """Accepts publishes while `is_connected`; refuses topics in `refuse`; fails the publish at `fail_at`."""

    def __init__(self) -> None:
        self.settings = MqttSettings()
        self.is_connected = False
        self.published: list[tuple[str, bytes]] = []
        self.refuse: set[str] = set()
        self.fail_at: int | None = None

    def publish(self, topic: str, payload: Payload = None, **options: Any) -> None:
        assert isinstance(payload, bytes), "the forwarder publishes the outbox's bytes"
        if self.fail_at is not None and len(self.published) == self.fail_at:
            self.fail_at = None
            raise NotConnectedError("the broker went away")
        if topic in self.refuse:
            raise PublishRejectedError("0x87 Not authorized")
        self.published.append((topic, payload))


def make_forwarder(tmp_path: Path, client: FakeClient, max_entries: int = 100) -> tuple[ResultForwarder, ResultsOutbox]:
    path = tmp_path / "outbox.sqlite"
    forwarder = ResultForwarder(path, client, DeviceTopics("cam-a"), max_entries)
    return forwarder, ResultsOutbox(path)


def test_forwarder_when_disconnected_then_keeps_entries_across_a_restart_and_sends_them_in_order(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    forwarder, sink_side = make_forwarder(tmp_path, client)
    for index in range(5):
        sink_side.put("people", "cam/1" if index % 2 else "cam0", json.dumps({"frame": index}).encode())

    # while the client is offline (and has no spool) nothing is taken from the outbox
    assert forwarder.drain_once() == -1 and forwarder.stats().waiting == 5

    # and they survive a restart of the agent
    forwarder.stop()
    forwarder, _ = make_forwarder(tmp_path, client)
    assert forwarder.stats().waiting == 5

    # a failure half way keeps the rest, in order
    client.is_connected = True
    client.fail_at = 2
    assert forwarder.drain_once() == -1
    assert forwarder.stats().waiting == 3
    assert forwarder.drain_once() == 3
    topics = [topic for topic, _ in client.published]
    assert [json.loads(payload)["frame"] for _, payload in client.published] == [0, 1, 2, 3, 4]
    assert topics[:2] == ["edge/cam-a/results/people/cam0", "edge/cam-a/results/people/cam_1"]
    assert forwarder.stats().waiting == 0 and forwarder.stats().published == 5
    forwarder.stop()


def test_forwarder_when_broker_refuses_or_outbox_overflows_then_counted_and_reported(tmp_path: Path) -> None:
    client = FakeClient()
    client.is_connected = True
    forwarder, sink_side = make_forwarder(tmp_path, client, max_entries=2)
    client.refuse.add("edge/cam-a/results/people/cam")
    for index in range(4):
        sink_side.put("people", "cam", json.dumps({"frame": index}).encode())

    assert forwarder.drain_once() == 0, "refused entries are dropped, not retried forever"
    forwarder._report_evictions()

    stats = forwarder.stats()
    assert (stats.evicted, stats.rejected, stats.waiting) == (2, 2, 0), stats
    telemetry = [json.loads(p) for t, p in client.published if t == "edge/cam-a/telemetry/results-outbox"]
    assert telemetry == [{"device": "cam-a", "published": 0, "waiting": 0, "evicted": 2, "rejected": 2}]
    forwarder.stop()
