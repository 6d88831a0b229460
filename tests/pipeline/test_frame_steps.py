"""One frame's path (pipeline/frame_steps.py), shared by both runtimes: what crosses the results
channel, how frames share engine calls, and the timing fields each runtime fills."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.preprocess import PreprocessSpec, frame_feed
from edge_sdk.core.results import Frame, FrameMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.dispatch import LocalDispatch
from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout
from edge_sdk.pipeline.frame_steps import TIMING_FIELDS, FrameInference
from edge_sdk.pipeline.messages import InferenceDone
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.pipeline.shared_segments import new_run_token
from edge_sdk.pipeline.stages.inference import Batcher
from edge_sdk.postprocess.classification import ClassificationSpec
from edge_sdk.profiles import DeviceProfile

from ..conftest import DEMO_MODEL
from .test_cascade import CountingRunner

WORKER = 1000
BGR_RED, BGR_BLUE = (0, 0, 255), (255, 0, 0)
COLOURS = ClassificationSpec(type="classification", output="scores", labels=["red", "green", "blue"])


class RecordingSender:
    """The results channel as the worker sees it: keeps each message as the socket would carry it."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def send(self, message: InferenceDone) -> bool:
        self.payloads.append(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        return True

    def messages(self) -> list[InferenceDone]:
        return [pickle.loads(payload) for payload in self.payloads]


@pytest.fixture
def mean_classifier(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> Iterator[CountingRunner]:
    """uint8 NHWC of any batch and size -> per-channel means: class 0 for red frames, 2 for blue."""
    with prepare_engine(tiny_models["uint8_mean_classifier"], cpu_profile, cache=engine_cache).open() as runner:
        yield CountingRunner(runner)


@pytest.fixture
def ring() -> Iterator[FrameRing]:
    ring = FrameRing.create(RingLayout(4, 24, 32), new_run_token())
    yield ring
    ring.close()


def colour_inference(runner: EngineRunner) -> FrameInference:
    feed = frame_feed(PreprocessSpec(fold=False), runner.inputs[0])
    return FrameInference(runner, runner.inputs[0].name, feed, COLOURS.build())


def solid(bgr: tuple[int, int, int], height: int = 24, width: int = 32) -> np.ndarray:
    return np.full((height, width, 3), bgr, dtype=np.uint8)


def write_frame(ring: FrameRing, seq: int, image: np.ndarray) -> None:
    slot, _ = ring.acquire_for_write(owner=1, drop_ready=False)
    assert slot is not None
    height, width = image.shape[:2]
    ring.frame_buffer(slot, height, width)[...] = image
    ring.commit(slot, seq, height, width, 0.0)


def test_inference_worker_sends_each_frames_result_and_no_raw_engine_output(
    mean_classifier: CountingRunner, ring: FrameRing
) -> None:
    # given a red and a blue frame claimed from a ring by a worker
    write_frame(ring, 0, solid(BGR_RED))
    write_frame(ring, 1, solid(BGR_BLUE))
    claimed = ring.take_ready(WORKER, newest=False, limit=2)
    sender = RecordingSender()
    # when the worker infers them
    Batcher(WORKER, ("cam",), LocalDispatch(colour_inference(mean_classifier)), sender).infer(
        [(0, info) for info in claimed], [ring]
    )
    # then each frame's decoded Result crosses the channel, and no array does
    messages = sender.messages()
    assert [(m.frame.index, m.result.classifications[0].label) for m in messages] == [(0, "red"), (1, "blue")], (
        "the worker post-processes: the output stage gets classes, not the engine's outputs"
    )
    assert all(b"numpy" not in payload for payload in sender.payloads), (
        "no numpy array (a raw output) is pickled onto the results channel"
    )
    assert set(messages[0].result.timings_ms) == {"preprocess", "infer", "batch", "postprocess", "queued"}
    assert ring.states()["sent"] == 2, "both frames wait, SENT, for the output stage to take them over"
    assert mean_classifier.batches == [2], "frames of one shape share an engine call"


def test_frame_inference_when_frames_differ_in_size_runs_one_engine_call_per_size(
    mean_classifier: CountingRunner,
) -> None:
    # given raw frames of two sizes (no resize): they cannot share a tensor
    images = [solid(BGR_RED), solid(BGR_BLUE, 16, 16), solid(BGR_BLUE)]
    frames = [Frame(FrameMeta("cam", i, 0.0, image.shape[1], image.shape[0]), image) for i, image in enumerate(images)]
    # when
    results = colour_inference(mean_classifier)(frames)
    # then the results keep the frames' order and say which call computed them
    assert [r.classifications[0].label for r in results] == ["red", "blue", "blue"]
    assert sorted(mean_classifier.batches) == [1, 2], "one call for the two 32x24 frames, one for the 16x16"
    assert [r.timings_ms["batch"] for r in results] == [2.0, 1.0, 2.0]


def detector_config(video: Path, jsonl: Path, mode: str) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "name": "timings",
            "model": {"path": str(DEMO_MODEL)},
            "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
            "sources": [{"uri": str(video), "name": "cam"}],
            "postprocess": {"type": "ssd", "labels": ["person"]},
            "sinks": [{"type": "jsonl", "path": str(jsonl)}],
            "runtime": {"mode": mode},
        }
    )


@pytest.mark.slow
def test_inline_and_multi_process_runtimes_report_the_same_timing_fields(
    small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, tmp_path: Path
) -> None:
    # given one pipeline, run by each runtime
    fields, means = {}, {}
    for mode in ("inline", "processes"):
        jsonl = tmp_path / f"{mode}.jsonl"
        # when
        summary = run_pipeline(detector_config(small_video, jsonl, mode), cpu_profile, engine_cache)
        results = [json.loads(line) for line in jsonl.read_text().splitlines()]
        assert len(results) == 24
        fields[mode] = {tuple(sorted(r["timings_ms"])) for r in results}
        means[mode] = set(summary.stage_mean_ms)
        waits = [r["timings_ms"]["queued"] for r in results]
        read_ahead_removed = [r["timings_ms"]["total"] - r["timings_ms"]["queued"] for r in results]
        assert summary.latency_p50_ms == pytest.approx(float(np.percentile(read_ahead_removed, 50)), abs=0.01), (
            "a file's latency is each frame's total without its wait in the ring (read ahead by design)"
        )
        if mode == "inline":
            assert set(waits) == {0.0}, "inline, a frame goes straight from the source to the engine"
    # then
    assert fields["inline"] == fields["processes"] == {tuple(sorted(TIMING_FIELDS))}, (
        "every result of either runtime carries the same timing fields"
    )
    assert means["processes"] == set(TIMING_FIELDS) - {"batch"} | {"sinks"}
    assert means["inline"] == means["processes"] | {"capture"}, "inline adds the source's read"


@pytest.mark.slow
def test_a_live_sources_wait_in_its_ring_counts_as_latency_even_when_it_blocks(
    cpu_profile: DeviceProfile, engine_cache: EngineCache, tmp_path: Path
) -> None:
    # given a live camera (a realtime synthetic one) told not to drop frames (buffer: block)
    jsonl = tmp_path / "live.jsonl"
    config = PipelineConfig.model_validate(
        {
            "name": "live",
            "model": {"path": str(DEMO_MODEL)},
            "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
            "sources": [{"uri": "synthetic://?frames=20&fps=60&size=320x240&realtime=true", "buffer": "block"}],
            "postprocess": {"type": "ssd", "labels": ["person"]},
            "sinks": [{"type": "jsonl", "path": str(jsonl)}],
            "runtime": {"mode": "processes", "inference_workers": 1},
        }
    )
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache)
    # then the summary's latency is the frames' whole total, ring wait included
    totals = [json.loads(line)["timings_ms"]["total"] for line in jsonl.read_text().splitlines()]
    assert summary.latency_p50_ms == pytest.approx(float(np.percentile(totals, 50)), abs=0.01)
