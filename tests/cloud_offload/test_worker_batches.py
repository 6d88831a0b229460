"""The worker's pieces without a broker: the bounded queue and its batches, which requests it would
answer at all, the load meter and the rate-limited refusal log."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from cloud_offload import protocol, tensor_codec
from cloud_offload.tensor_codec import TensorPayload
from cloud_offload.worker_batches import LoadMeter, RateLimitedLog, Request, RequestQueue, SloBatchers, WorkerStats
from cloud_offload.worker_wire import Refused, check_request, error_answer
from edge_sdk.mqtt import Message


def request(key: str = "k", shape: object = (300, 300), frame_id: int = 0) -> Request:
    payload = TensorPayload(frame_id, 0.0, {})
    return Request("cam", key, protocol.WHOLE, shape, protocol.response_topic("cam"), b"c" * 16, payload)


def test_a_full_queue_refuses_and_a_closed_one_too() -> None:
    queue = RequestQueue(capacity=2)
    assert queue.put(request()) and queue.put(request())
    assert not queue.put(request()), "the third finds no room: the caller answers 'worker overloaded'"
    queue.close()
    assert len(queue) == 2 and not queue.put(request())


def test_a_batch_is_the_oldest_request_and_later_ones_of_its_key_up_to_the_size_others_keep_their_order() -> None:
    queue = RequestQueue(capacity=16)
    order = [("a", (1,)), ("b", (1,)), ("a", (2,)), ("a", (1,)), ("a", (1,)), ("b", (1,))]
    for index, (key, shape) in enumerate(order):
        queue.put(request(key, shape, index))
    # a full batch returns at once, however long the delay
    started = time.monotonic()
    first = queue.take_batch(batch_size=2, delay_s=10.0)
    assert time.monotonic() - started < 1.0
    assert [r.payload.frame_id for r in first] == [0, 3]
    # the rest keep their arrival order; a batch that does not fill waits out the delay, not more
    started = time.monotonic()
    assert [r.payload.frame_id for r in queue.take_batch(batch_size=8, delay_s=0.05)] == [1, 5]
    assert 0.04 <= time.monotonic() - started < 1.0
    assert [r.payload.frame_id for r in queue.take_batch(8, 0.0)] == [2], "another shape is another batch"
    assert [r.payload.frame_id for r in queue.take_batch(8, 0.0)] == [4]
    assert queue.take_batch(8, 0.0, timeout=0.01) == []


def test_a_batch_filling_up_is_handed_over_when_it_is_full() -> None:
    queue = RequestQueue(capacity=16)
    queue.put(request(frame_id=0))

    def more() -> None:
        time.sleep(0.05)
        for index in (1, 2):
            queue.put(request(frame_id=index))

    threading.Thread(target=more).start()
    started = time.monotonic()
    batch = queue.take_batch(batch_size=3, delay_s=5.0)
    assert [r.payload.frame_id for r in batch] == [0, 1, 2] and time.monotonic() - started < 2.0


def test_a_closed_queue_hands_out_what_is_left_without_waiting_then_nothing() -> None:
    queue = RequestQueue(capacity=4)
    queue.put(request())
    queue.close()
    started = time.monotonic()
    assert len(queue.take_batch(batch_size=8, delay_s=5.0)) == 1
    assert queue.take_batch(batch_size=8, delay_s=5.0) == []
    assert time.monotonic() - started < 1.0


def message(topic: str, response: str | None, correlation: bytes | None) -> Message:
    return Message(topic, b"", 1, False, response, correlation)


def test_only_requests_asking_for_their_own_devices_answers_with_correlation_data_are_answered() -> None:
    topic = protocol.request_topic("cam", "k", protocol.WHOLE)
    address, answer_to, correlation = check_request(message(topic, protocol.response_topic("cam"), b"x" * 16))
    assert (address.device, address.model_key, address.part) == ("cam", "k", protocol.WHOLE)
    assert answer_to == protocol.response_topic("cam") and correlation == b"x" * 16
    cases = {
        "wrong response topic": message(topic, protocol.response_topic("other"), b"x"),
        "bad correlation data": message(topic, protocol.response_topic("cam"), None),
        "malformed request topic": message("edge/cam/offload/req/k", protocol.response_topic("cam"), b"x"),
    }
    for reason, case in cases.items():
        with pytest.raises(Refused) as refused:
            check_request(case)
        assert refused.value.reason == reason
    with pytest.raises(Refused):
        check_request(message(topic, protocol.response_topic("cam"), b"x" * 1000))


def test_an_error_answer_carries_the_reason_and_the_requests_frame() -> None:
    decoded = tensor_codec.decode(error_answer(TensorPayload(9, 12.5, {}), "worker overloaded"))
    assert (decoded.frame_id, decoded.deadline) == (9, 12.5)
    assert decoded.tensors[protocol.ERROR_TENSOR].tobytes() == b"worker overloaded"
    assert decoded.tensors[protocol.ERROR_TENSOR].dtype == np.uint8


def test_the_load_meter_reports_recent_waits_and_the_busy_share_since_it_was_last_read() -> None:
    meter = LoadMeter(window_s=0.2)
    meter.read()
    now = time.monotonic()
    meter.batch_ran(now - 0.01, now, [4.0, 8.0])
    time.sleep(0.02)
    queue_ms, busy = meter.read()
    assert queue_ms == pytest.approx(6.0) and 0.1 < busy <= 1.0
    time.sleep(0.25)
    assert meter.read() == (0.0, 0.0), "an idle worker makes no one wait"


def test_refusals_log_one_warning_per_reason_then_quietly(caplog: pytest.LogCaptureFixture) -> None:
    refusals = RateLimitedLog(logging.getLogger("test.refusals"), every_s=60)
    with caplog.at_level(logging.DEBUG, "test.refusals"):
        for index in range(5):
            refusals.warning("wrong response topic", f"request {index}")
        refusals.warning("bad correlation data", "request 5")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["wrong response topic: request 0", "bad correlation data: request 5"]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 4


def test_stats_give_the_mean_batch() -> None:
    assert WorkerStats(batches=4, batched=10).mean_batch == 2.5
    assert WorkerStats().mean_batch == 0.0
    assert "mean batch 2.50" in WorkerStats(batches=4, batched=10).line()


def slo_queue(slo_ms: float = 100.0) -> RequestQueue:
    seeds = {1: 10.0, 2: 12.0, 4: 16.0, 8: 24.0}
    return RequestQueue(capacity=16, slo=SloBatchers(slo_ms, 8, lambda key: seeds))


def test_the_slo_queue_sheds_a_request_whose_edge_deadline_leaves_too_little_and_runs_the_rest() -> None:
    # given two requests just arrived: one the edge gave up on in 5 ms (it waited in the broker), one fresh
    queue = slo_queue()
    late = Request("cam", "k", protocol.WHOLE, (1,), "t", b"c" * 16, TensorPayload(1, time.time() + 0.005, {}))
    fresh = Request("cam", "k", protocol.WHOLE, (1,), "t", b"c" * 16, TensorPayload(2, time.time() + 10.0, {}))
    assert queue.put(late) and queue.put(fresh)
    # when
    batch, shed = queue.take_slo_batch(timeout=1.0)
    # then the one the edge will have computed itself by then is answered 'shed' at once
    assert [r.payload.frame_id for r in shed] == [1]
    assert [r.payload.frame_id for r in batch] == [2]
    assert len(queue) == 0


def test_the_slo_queue_runs_what_waits_at_once_as_one_batch() -> None:
    queue = slo_queue()
    for frame in range(5):
        queue.put(Request("cam", "k", protocol.WHOLE, (1,), "t", b"c" * 16, TensorPayload(frame, time.time() + 10, {})))
    batch, shed = queue.take_slo_batch(timeout=1.0)
    assert shed == [] and [r.payload.frame_id for r in batch] == [0, 1, 2, 3], "a power of two: 4, then 1"
    batch, shed = queue.take_slo_batch(timeout=1.0)
    assert [r.payload.frame_id for r in batch] == [4]
