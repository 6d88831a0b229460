"""The memory a pipeline's rings and batches need, worked out before allocation and refused with the figure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.frame_ring import RingLayout
from edge_sdk.pipeline.memory_budget import (
    MAX_MEMORY_FRACTION,
    HostMemory,
    check_memory,
    check_pipeline_memory,
    estimate_memory,
)

GB = 10**9


def config(sources: int = 1, preprocess: dict[str, Any] | None = None, **runtime: Any) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "name": "budget",
            "model": {"path": "model.onnx"},
            "preprocess": preprocess or {},
            "sources": [{"uri": f"rtsp://cam/{index}"} for index in range(sources)],
            "postprocess": {"type": "ssd", "labels": ["person"]},
            "runtime": runtime,
        }
    )


def test_estimate_memory_when_rings_are_counted_matches_what_frame_ring_allocates() -> None:
    # given 3 sources of 8 slots, two of them 1920x1080 and one 640x480
    sizes = [(1920, 1080), (1920, 1080), (640, 480)]
    # when
    estimate = estimate_memory(config(sources=3, ring_slots=8), sizes)
    # then
    expected = sum(RingLayout(8, height, width).total_bytes for width, height in sizes)
    assert estimate.ring_bytes == expected, "the estimate uses the very layout FrameRing.create sizes segments by"
    assert estimate.describe_rings() == "3 sources x 8 slots of 1920x1080, 640x480"


def test_estimate_memory_when_no_sizes_are_given_assumes_max_frame_size_for_every_source() -> None:
    estimate = estimate_memory(config(sources=2, ring_slots=4, max_frame_size=[1280, 720]))
    assert estimate.frame_sizes == ((1280, 720), (1280, 720))
    assert estimate.ring_bytes == 2 * RingLayout(4, 720, 1280).total_bytes


def test_estimate_memory_when_not_folded_counts_each_worker_batch_of_model_inputs() -> None:
    # given float32 300x300 inputs preprocessed in the worker, batches of 4 in 2 workers
    spec = config(
        ring_slots=8,
        batch_size=4,
        preprocess={"resize": [300, 300], "dtype": "float32", "fold": False},
    )
    # when
    estimate = estimate_memory(spec, [(1920, 1080)], workers=2)
    # then: per worker, four tensors and their stacked copy
    assert estimate.batch_bytes == 2 * (2 * 4 * 300 * 300 * 3 * 4)
    assert estimate.total_bytes == estimate.ring_bytes + estimate.batch_bytes


def test_estimate_memory_when_folded_counts_raw_frames_and_caps_the_batch_at_the_slots() -> None:
    # given a batch larger than all the slots there are: a batch can never hold more frames than the rings
    spec = config(sources=1, ring_slots=4, batch_size=64, preprocess={"resize": [300, 300], "fold": True})
    # when
    estimate = estimate_memory(spec, [(640, 480)], workers=1)
    # then
    assert estimate.batch == 4, "a batch fills from the rings' slots at most"
    assert estimate.batch_bytes == 2 * 4 * 640 * 480 * 3, "a folded engine takes raw uint8 frames"


def test_estimate_memory_when_the_input_size_is_known_uses_it() -> None:
    estimate = estimate_memory(config(batch_size=2), [(64, 48)], workers=3, input_bytes=1000)
    assert estimate.batch_bytes == 3 * 2 * 2 * 1000


def test_estimate_memory_when_sizes_do_not_match_the_sources_raises_value_error() -> None:
    with pytest.raises(ValueError):
        estimate_memory(config(sources=2), [(64, 48)])


def test_check_memory_when_rings_exceed_free_shm_says_how_much_and_what_to_lower() -> None:
    # given 3 sources x 1024 slots of 1920x1080 (19.1 GB) and a host with 12 GB free in /dev/shm
    estimate = estimate_memory(config(sources=3, ring_slots=1024), [(1920, 1080)] * 3)
    host = HostMemory(shm_free_bytes=12 * GB, physical_bytes=64 * GB, shm_dir=Path("/dev/shm"))
    # when
    with pytest.raises(ConfigError) as raised:
        check_memory(estimate, host)
    # then
    message = str(raised.value)
    assert message == (
        "the rings need 19.1 GB of shared memory for 3 sources x 1024 slots of 1920x1080; "
        "this host has 12.0 GB free in /dev/shm; lower runtime.ring_slots or max_frame_size"
    ), message


def test_check_memory_when_rings_and_batches_exceed_the_share_of_physical_memory_refuses() -> None:
    # given rings that fit in /dev/shm but, with float32 4K batches, more than the share of RAM a pipeline gets
    spec = config(ring_slots=16, batch_size=512, preprocess={"resize": [4096, 4096], "dtype": "float32", "fold": False})
    estimate = estimate_memory(spec, [(1920, 1080)], workers=2)
    host = HostMemory(shm_free_bytes=100 * GB, physical_bytes=16 * GB)
    # when
    with pytest.raises(ConfigError) as raised:
        check_memory(estimate, host)
    # then
    message = str(raised.value)
    assert "the rings and batches need" in message and "2 inference workers x batch 16" in message, message
    assert f"{MAX_MEMORY_FRACTION:.0%} of this host's 16.0 GB" in message, message
    assert "batch_size" in message and "\n" not in message


def test_check_memory_when_everything_fits_passes() -> None:
    estimate = estimate_memory(config(ring_slots=8), [(1920, 1080)])
    check_memory(estimate, HostMemory(shm_free_bytes=1 * GB, physical_bytes=8 * GB))


def test_check_memory_when_the_host_figures_are_unknown_does_not_refuse() -> None:
    estimate = estimate_memory(config(ring_slots=1024, sources=4), [(16384, 16384)] * 4)
    check_memory(estimate, HostMemory(shm_free_bytes=None, physical_bytes=None))


def test_check_pipeline_memory_when_it_fits_returns_the_estimate() -> None:
    estimate = check_pipeline_memory(
        config(ring_slots=3), [(64, 48)], workers=1, host=HostMemory(shm_free_bytes=GB, physical_bytes=GB)
    )
    assert estimate.ring_bytes == RingLayout(3, 48, 64).total_bytes


def test_host_memory_when_probed_on_linux_reports_dev_shm_and_ram() -> None:
    host = HostMemory.probe()
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm on this host")
    stats = os.statvfs("/dev/shm")
    assert host.shm_free_bytes is not None and 0 < host.shm_free_bytes <= stats.f_blocks * stats.f_frsize, (
        "the free part of /dev/shm: more than nothing, no more than its size"
    )
    assert host.physical_bytes is not None and host.physical_bytes > 0
    assert HostMemory.probe(Path("/nonexistent-shm-dir")).shm_free_bytes is None, "unknown, not zero, without one"


@pytest.mark.parametrize(
    ("workers", "batch", "slots", "warned"),
    [(4, 8, 8, False), (6, 8, 8, True), (4, 16, 8, True), (6, 8, 24, False)],
    ids=["4x8-on-8-slots", "6x8-on-8-slots", "4x16-on-8-slots", "6x8-on-24-slots"],
)
def test_check_pipeline_memory_warns_once_when_batches_can_hold_most_ring_slots(
    workers: int, batch: int, slots: int, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # given 8 sources (the H200's layouts: those warned about collapsed to 20-33 FPS, the others ran at 337-413)
    spec = config(sources=8, ring_slots=slots, batch_size=batch)
    # when
    with caplog.at_level("WARNING", logger="edge_sdk.pipeline.memory_budget"):
        check_pipeline_memory(spec, [(640, 360)] * 8, workers=workers, host=HostMemory(None, None, Path("/dev/shm")))
    # then
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == int(warned), messages
    if warned:
        assert f"raise runtime.ring_slots to at least {-(-2 * workers * batch // 8)}" in messages[0], messages[0]
