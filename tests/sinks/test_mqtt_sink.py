"""The MQTT sink: one JSON message per result on a templated topic, and never blocking while the broker is away."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from edge_sdk.core.errors import ConfigError, SinkError
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.mqtt import ConnectionState, MqttClient, MqttSettings
from edge_sdk.sinks import SinkSpec, create_sink
from edge_sdk.sinks.mqtt import MqttSink, MqttSinkSpec, TopicTemplate
from tests.support.clients import Inbox
from tools.harness.broker import BrokerFactory

WIDTH, HEIGHT = 160, 120


def make_result(index: int, source: str = "cam", boxes: int = 1) -> Result:
    meta = FrameMeta(source=source, index=index, timestamp=1000.25 + index, width=WIDTH, height=HEIGHT)
    person = Detection(x1=10.0, y1=20.0, x2=60.0, y2=110.0, score=0.87, class_id=0, label="person")
    return Result(frame=meta, detections=(person,) * boxes, timings_ms={"total": 12.5})


IMAGE = np.zeros((HEIGHT, WIDTH, 3), dtype=np.uint8)


# --- configuration (no broker) ------------------------------------------------------------------------


def test_mqtt_sink_spec_when_topic_has_an_unknown_placeholder_is_rejected_naming_it() -> None:
    # given / when
    with pytest.raises(ValidationError) as caught:
        MqttSinkSpec(type="mqtt", topic="edge/{pipeline}/{camera}")

    # then
    message = str(caught.value)
    assert "{camera}" in message, "the error names the unknown placeholder"
    assert "{pipeline}" in message and "{source}" in message and "{frame}" in message, "it lists the valid ones"


@pytest.mark.parametrize("topic", ["edge/{}/x", "edge/{source.name}", "edge/{frame", "edge/+/x", "edge/#", ""])
def test_topic_template_when_malformed_raises_config_error(topic: str) -> None:
    # given / when / then
    with pytest.raises(ConfigError, match="topic template"):
        TopicTemplate(topic)


def test_topic_template_when_a_source_name_has_slashes_or_wildcards_keeps_one_topic_level() -> None:
    # given
    template = TopicTemplate("edge/{pipeline}/{source}/{frame:06d}")

    # when
    topic = template.render(pipeline="demo", source="rtsp://cam/1+#", frame=42)

    # then
    assert topic == "edge/demo/rtsp:__cam_1__/000042", "names cannot add levels or wildcards; format specs apply"


def test_mqtt_sink_when_built_from_a_pipeline_file_entry_gets_broker_settings_and_default_pipeline_name() -> None:
    # given a sinks entry as it appears in a pipeline file (the password is named, never written)
    spec = TypeAdapter(SinkSpec).validate_python(
        {
            "type": "mqtt",
            "broker": {"host": "broker.local", "username": "edge", "password_env": "EDGE_MQTT_PASSWORD"},
            "topic": "site/{pipeline}/{source}",
            "qos": 2,
        }
    )

    # when
    sink = create_sink(spec, "pipeline")

    # then
    assert isinstance(sink, MqttSink), "type: mqtt builds an MqttSink"
    assert sink.settings.address == "broker.local:1883", "broker settings come from the spec"
    assert sink.qos == 2, "the configured QoS is used"
    assert sink.template.render(sink.pipeline_name, "cam", 0) == "site/pipeline/cam", (
        "until the runtime passes the pipeline name, {pipeline} is 'pipeline'"
    )
    assert sink.client.state is ConnectionState.IDLE, "building the sink does not connect"


def test_mqtt_sink_when_written_before_open_raises_sink_error() -> None:
    # given
    sink = MqttSink(MqttSettings(host="127.0.0.1", port=1), include_empty=True)

    # when / then
    with pytest.raises(SinkError, match="not open"):
        sink.write(make_result(0), IMAGE)


# --- against a broker ---------------------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.timeout(60)
def test_mqtt_sink_when_results_are_written_publishes_one_json_message_each_to_the_templated_topic(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a subscriber on the sink's topics and a QoS 2 sink
    broker = start_broker()
    inbox = Inbox()
    results = [make_result(0, "porch"), make_result(1, "porch"), make_result(2, "yard", boxes=2)]
    sink = MqttSink(broker.settings(), topic=f"{topic_prefix}/{{pipeline}}/{{source}}", qos=2, pipeline_name="demo")

    with MqttClient(broker.settings()) as subscriber:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=2)

        # when
        sink.open()
        for result in results:
            sink.write(result, IMAGE)
        sink.close()
        received = inbox.wait_for(len(results))
        everything = inbox.settle()

    # then
    assert len(everything) == len(results), "exactly one message per result"
    topics = sorted(m.topic for m in received)
    assert topics == [f"{topic_prefix}/demo/porch"] * 2 + [f"{topic_prefix}/demo/yard"], (
        "the topic template is filled with the pipeline name and each result's source"
    )
    assert {m.qos for m in received} == {2}, "messages travel with the configured QoS"
    payloads = sorted((json.loads(m.payload) for m in received), key=lambda d: d["frame"])
    assert payloads == [r.to_dict() for r in results], "each payload is the result's to_dict() as JSON"
    assert sink.stats.published == 3 and sink.stats.dropped == 0, "the stats count every publish, no drops"


@pytest.mark.broker
@pytest.mark.timeout(60)
def test_mqtt_sink_when_include_empty_is_false_skips_frames_without_detections(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given
    broker = start_broker()
    inbox = Inbox()
    sink = MqttSink(broker.settings(), topic=f"{topic_prefix}/{{source}}/{{frame}}", qos=1, include_empty=False)

    with MqttClient(broker.settings()) as subscriber:
        subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)

        # when frame 1 has nothing in it
        sink.open()
        for result in (make_result(0), make_result(1, boxes=0), make_result(2)):
            sink.write(result, IMAGE)
        sink.close()
        inbox.wait_for(2)
        received = inbox.settle()

    # then
    assert sorted(m.topic for m in received) == [f"{topic_prefix}/cam/0", f"{topic_prefix}/cam/2"], (
        "only frames with detections are published; {frame} fills in the frame index"
    )
    assert sink.stats.skipped_empty == 1, "skipped frames are counted"


@pytest.mark.broker
@pytest.mark.timeout(60)
def test_mqtt_sink_when_retain_is_true_a_late_subscriber_gets_the_last_result(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given
    broker = start_broker()
    sink = MqttSink(broker.settings(), topic=f"{topic_prefix}/{{source}}/latest", qos=1, retain=True)
    sink.open()
    for index in range(3):
        sink.write(make_result(index), IMAGE)
    sink.close()
    inbox = Inbox()

    # when someone subscribes afterwards
    with MqttClient(broker.settings()) as late:
        late.subscribe(f"{topic_prefix}/#", inbox, qos=1)
        received = inbox.wait_for(1)

    # then
    assert [(json.loads(m.payload)["frame"], m.retain) for m in received] == [(2, True)], (
        "the broker retained the last result and marks it as retained"
    )


@pytest.mark.broker
@pytest.mark.timeout(60)
def test_mqtt_sink_when_credentials_are_refused_open_raises_sink_error_with_the_reason(
    start_broker: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given
    broker = start_broker(passwords={"edge": "right"})
    monkeypatch.setenv("EDGE_TEST_MQTT_PASSWORD", "wrong")
    sink = MqttSink(broker.settings(username="edge", password_env="EDGE_TEST_MQTT_PASSWORD"))

    # when
    with pytest.raises(SinkError) as caught:
        sink.open()

    # then
    assert "not authorized" in str(caught.value).lower(), "the broker's refusal is in the sink's error"
    assert sink.client.state is ConnectionState.CLOSED, "a refused sink does not keep retrying"


@pytest.mark.broker
@pytest.mark.timeout(60)
def test_mqtt_sink_when_broker_is_down_does_not_block_counts_overflow_and_delivers_the_queue_later(
    start_broker: BrokerFactory, topic_prefix: str
) -> None:
    # given a persistent subscriber session, then the broker goes down before the sink opens
    broker = start_broker(persistence=True)
    inbox = Inbox()
    max_queued, extra = 5, 3
    subscriber = MqttClient(broker.settings(client_id=f"sub-{topic_prefix[-8:]}", clean_start=False))
    subscriber.connect()
    subscriber.subscribe(f"{topic_prefix}/#", inbox, qos=1)
    broker.stop()
    sink = MqttSink(broker.settings(), topic=f"{topic_prefix}/{{frame}}", qos=1, max_queued=max_queued)

    try:
        # when results keep coming while the broker is away (the test's timeout bounds any blocking)
        sink.open()
        for index in range(max_queued + extra):
            sink.write(make_result(index), IMAGE)
        stats_while_down = sink.stats
        state_while_down = sink.client.state

        # and the broker comes back
        broker.start()
        received = inbox.wait_for(max_queued, timeout=20)
        everything = inbox.settle()
    finally:
        sink.close()
        subscriber.disconnect()

    # then
    assert state_while_down is ConnectionState.CONNECTING, "the sink opened anyway and keeps trying in the background"
    assert stats_while_down.published == max_queued, "up to max_queued results are held for later"
    assert stats_while_down.overflow == extra, "every result beyond max_queued is counted as overflow"
    assert len(everything) == max_queued, "exactly the held results are delivered"
    assert sorted(json.loads(m.payload)["frame"] for m in received) == list(range(max_queued)), (
        "the first max_queued results arrive after the reconnect; the overflow is gone"
    )
