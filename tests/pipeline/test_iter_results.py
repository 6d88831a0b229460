"""iter_results: a pipeline's results in the caller's own loop."""

from __future__ import annotations

import threading
from itertools import islice
from pathlib import Path

import pytest

from edge_sdk.core.errors import SourceError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.run import iter_results
from edge_sdk.profiles import DeviceProfile

from ..conftest import DEMO_MODEL


def config(video: Path, sinks: list[dict[str, object]] | None = None) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "name": "loop",
            "model": {"path": str(DEMO_MODEL)},
            "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
            "sources": [{"uri": str(video), "name": "cam"}],
            "postprocess": {"type": "ssd", "labels": ["person"]},
            "sinks": sinks or [],
        }
    )


def pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pipeline-")]


def test_iter_results_gives_every_frame_in_order_then_ends(
    small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, tmp_path: Path
) -> None:
    sink = tmp_path / "results.jsonl"
    results = list(iter_results(config(small_video, [{"type": "jsonl", "path": str(sink)}]), cpu_profile, engine_cache))
    assert [r.frame.index for r in results] == list(range(24))
    assert sum(len(r.detections) for r in results) > 0, "the astronaut is found"
    assert len(sink.read_text().splitlines()) == 24, "the pipeline's own sinks run too"
    assert not pipeline_threads()


def test_leaving_the_loop_early_stops_the_pipeline_and_its_thread(
    small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # a queue of one: the pipeline is held back by the loop, then stopped while it waits
    first = list(islice(iter_results(config(small_video), cpu_profile, engine_cache, max_pending=1), 2))
    assert [r.frame.index for r in first] == [0, 1]
    assert not pipeline_threads(), "the generator's close stops and joins the pipeline"


def test_a_pipeline_that_cannot_start_raises_from_the_loop(
    tmp_path: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    with pytest.raises(SourceError, match="not found"):
        for _ in iter_results(config(tmp_path / "missing.mp4"), cpu_profile, engine_cache):
            pass
    assert not pipeline_threads()
