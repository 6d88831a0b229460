"""The agent's results forwarder: outbox order, deletion only after the client accepted, evictions reported."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from edge_sdk.fleet.device.results_forwarder import ResultForwarder
from edge_sdk.mqtt import MqttSettings, NotConnectedError, PublishRejectedError
from edge_sdk.mqtt.publishing import Payload
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.sinks.agent import ResultsOutbox
from tests.support.waits import poll_until


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


def test_forwarder_previews_when_connected_then_each_new_one_goes_once_at_qos_0_apart_from_results(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    forwarder, sink_side = make_forwarder(tmp_path, client)
    sink_side.put("people", "cam", b'{"frame": 0}')
    sink_side.put_preview("people", "cam/1", b"jpeg-1", at=1.0)

    # while offline the preview waits (live data is not spooled), and the results are not touched
    assert forwarder.send_previews() == 1 and client.published == []

    # once connected it goes out once, to telemetry/preview/<pipeline>/<source>, with the JPEG's bytes
    client.is_connected = True
    assert forwarder.send_previews() == 0
    assert client.published == [("edge/cam-a/telemetry/preview/people/cam_1", b"jpeg-1")]
    assert forwarder.send_previews() == 0 and len(client.published) == 1, "sent once"
    assert forwarder.stats().waiting == 1, "results are the other thread's"

    # a newer one replaces it and goes out too; a failed publish is tried again on the next round
    sink_side.put_preview("people", "cam/1", b"jpeg-2", at=2.0)
    client.fail_at = 1
    assert forwarder.send_previews() == 1
    assert forwarder.send_previews() == 0
    assert [payload for _, payload in client.published] == [b"jpeg-1", b"jpeg-2"]
    assert forwarder.previews_published == 2
    forwarder.stop()


def test_forwarder_previews_when_started_then_published_without_waiting_for_results(tmp_path: Path) -> None:
    class SlowResults(FakeClient):
        """Holds every QoS 1 publish (a result) for a while, as a slow broker would."""

        def publish(self, topic: str, payload: Payload = None, **options: Any) -> None:
            if options.get("qos") == 1:
                time.sleep(0.2)
            super().publish(topic, payload, **options)

    client = SlowResults()
    client.is_connected = True
    forwarder, sink_side = make_forwarder(tmp_path, client)
    for index in range(50):
        sink_side.put("people", "cam", json.dumps({"frame": index}).encode())
    forwarder.start()
    sink_side.put_preview("people", "cam", b"jpeg", at=1.0)
    assert poll_until(lambda: forwarder.previews_published == 1, 10.0), "the preview is not held up by results"
    assert forwarder.stats().waiting > 0, "results were still going out"
    forwarder.stop()
