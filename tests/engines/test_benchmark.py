"""Benchmarking a real engine: one timing per batch size, generated inputs of the right kind, or a real photo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.host import HostFacts
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.benchmark import benchmark_engine, check_benchmark_arguments, make_input
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.profiles import DeviceProfile

RED_BGR = np.zeros((48, 64, 3), np.uint8)
RED_BGR[:, :, 2] = 255  # OpenCV frames are BGR: red is the last channel


@pytest.fixture
def prepare(
    cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts, tiny_models: dict[str, Path]
) -> Any:
    def prepare_(model: str | Path) -> PreparedEngine:
        path = tiny_models[model] if isinstance(model, str) else model
        return prepare_engine(path, cpu_profile, cache=engine_cache, facts=host_facts)

    return prepare_


def test_benchmark_engine_when_given_batches_1_2_4_reports_one_timing_per_batch(prepare: Any) -> None:
    # Given the float classifier, which takes any batch
    # When it is benchmarked at batches 1, 2 and 4
    with prepare("float_classifier").open() as runner:
        timings = benchmark_engine(runner, [1, 2, 4], warmup=2, iterations=20)

    # Then there is one timing per batch, in order, with sane statistics
    assert [t.batch for t in timings] == [1, 2, 4], "one timing per requested batch, in the order asked"
    for timing in timings:
        assert timing.iterations == 20, "each timing must count the iterations it measured"
        assert timing.p99_ms >= timing.p50_ms > 0, f"latency percentiles must be positive and ordered: {timing}"
        assert timing.mean_ms > 0, f"the mean latency must be positive: {timing}"
        assert timing.throughput > 0, f"throughput must be positive: {timing}"
        assert set(timing.to_dict()) >= {"batch", "p50_ms", "p99_ms", "throughput"}, "the report must be printable"


def test_benchmark_engine_when_model_has_a_fixed_batch_of_1_rejects_batch_2(prepare: Any) -> None:
    # Given a classifier exported with a fixed batch of 1
    # When it is benchmarked at batch 2
    with prepare("float_classifier_batch1").open() as runner, pytest.raises(ConfigError) as raised:
        benchmark_engine(runner, [2], warmup=0, iterations=1)

    # Then the error says the batch is fixed and which batch was asked for
    message = str(raised.value)
    assert "fixed batch of 1" in message, "the error must say the model's batch is fixed at 1"
    assert "batch 2" in message, "the error must name the batch that was asked for"


@pytest.mark.parametrize(
    ("batches", "warmup", "iterations"), [([0], 1, 1), ([1], -1, 1), ([1], 1, 0)], ids=["batch-0", "warmup", "iter"]
)
def test_benchmark_engine_when_arguments_are_out_of_range_raises_config_error(
    batches: list[int], warmup: int, iterations: int, prepare: Any
) -> None:
    # Given a runnable engine
    # When it is benchmarked with a zero batch, negative warm-up or no iterations
    with prepare("float_classifier").open() as runner, pytest.raises(ConfigError) as raised:
        benchmark_engine(runner, batches, warmup=warmup, iterations=iterations)

    # Then one error states what is expected
    assert "expected" in str(raised.value), "the error must say what values are expected"


def test_benchmark_engine_when_given_a_photo_feeds_it_to_the_detector(
    prepare: Any, demo_model: Path, astronaut_bgr: Any
) -> None:
    # Given the shipped detector (uint8 NHWC RGB, any size) and the astronaut photo
    with prepare(demo_model).open() as runner:
        [meta] = runner.inputs

        # When the benchmark builds its input from the photo, and benchmarks with it
        tensor = make_input(meta, 1, 320, np.random.default_rng(0), image=astronaut_bgr)
        scores = runner.infer({meta.name: tensor})["detection_scores:0"]
        timings = benchmark_engine(runner, [1], warmup=1, iterations=3, image=astronaut_bgr)

    # Then the input is the photo resized and turned to RGB, the detector still sees the person, and it runs
    assert tensor.shape == (1, 320, 320, 3) and tensor.dtype == np.uint8, "the detector takes uint8 NHWC"
    assert float(scores[0, 0]) > 0.5, "the input must be the real photo (generated noise scores ~0.001)"
    assert [t.batch for t in timings] == [1], "benchmarking with a photo must produce a timing"


def test_make_input_when_given_a_bgr_photo_feeds_rgb_to_a_uint8_nhwc_model(prepare: Any) -> None:
    # Given a model that scores the mean of each RGB channel, and a pure red BGR frame
    with prepare("uint8_mean_classifier").open() as runner:
        [meta] = runner.inputs

        # When the benchmark builds a batch of 2 from the frame and the model runs it
        tensor = make_input(meta, 2, 32, np.random.default_rng(0), image=RED_BGR)
        scores = runner.infer({meta.name: tensor})["scores"]

    # Then the model sees red in both items
    assert tensor.shape == (2, 32, 32, 3), "unknown sizes must take dynamic_size; the batch must be repeated"
    assert scores.argmax(axis=1).tolist() == [0, 0], "a red BGR frame must reach the model as red (RGB order)"


def test_make_input_when_given_a_bgr_photo_feeds_scaled_rgb_to_a_float_nchw_model(prepare: Any) -> None:
    # Given the float NCHW classifier and a pure red BGR frame
    with prepare("float_classifier").open() as runner:
        [meta] = runner.inputs

    # When the benchmark builds its input from the frame
    tensor = make_input(meta, 1, 320, np.random.default_rng(0), image=RED_BGR)

    # Then it is float32 NCHW at the model's fixed size, red channel first, scaled to [0, 1]
    assert tensor.shape == (1, 3, 8, 8) and tensor.dtype == np.float32, "the input must fit images: float32[N,3,8,8]"
    np.testing.assert_allclose(tensor[0, 0], 1.0, err_msg="the red channel must come first and be scaled to 1")
    np.testing.assert_allclose(tensor[0, 1:], 0.0, err_msg="green and blue must be 0 for a red frame")


@pytest.mark.parametrize(
    ("batches", "warmup", "iterations", "dynamic_size", "fragment"),
    [
        ([100_000], 1, 1, 320, "expected batch sizes 1..1024, got 100000"),
        ([1], 10**9, 1, 320, "expected warmup 0..10000"),
        ([1], 1, 10**9, 320, "expected iterations 1..100000"),
        ([1], 1, 1, 10**6, "expected dynamic size 1..8192"),
        ([], 1, 1, 320, "expected at least one batch size"),
    ],
    ids=["batch-100000", "warmup", "iterations", "dynamic-size", "no-batch"],
)
def test_check_benchmark_arguments_when_out_of_bounds_raises_one_line_before_any_allocation(
    batches: list[int], warmup: int, iterations: int, dynamic_size: int, fragment: str
) -> None:
    # when / then: refused from the numbers alone, no engine and no input allocated
    with pytest.raises(ConfigError) as raised:
        check_benchmark_arguments(batches, warmup, iterations, dynamic_size)
    assert fragment in str(raised.value), str(raised.value)


def test_check_benchmark_arguments_when_inputs_would_exceed_the_cap_names_the_input_and_size() -> None:
    # given a float32 image input with dynamic sides, asked for 1024 x 3 x 4096 x 4096
    meta = TensorMeta("images", np.dtype(np.float32), ("N", 3, None, None))
    # when
    with pytest.raises(ConfigError) as raised:
        check_benchmark_arguments([1, 1024], 0, 1, 4096, [meta])
    # then
    message = str(raised.value)
    assert message.startswith("input images at batch 1024 (1024x3x4096x4096 float32) needs 192.0 GiB"), message
    assert "expected at most 4 GiB" in message, message


def test_benchmark_engine_when_batch_is_100000_raises_config_error_not_memory_error(prepare: Any) -> None:
    with prepare("float_classifier").open() as runner, pytest.raises(ConfigError, match=r"1\.\.1024"):
        benchmark_engine(runner, [100_000], warmup=0, iterations=1)
