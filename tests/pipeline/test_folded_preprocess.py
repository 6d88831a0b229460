"""Pipelines whose preprocessing is folded into the engine (preprocess.fold, the default): raw frames
go in, and the results match numpy/cv2 preprocessing (fold: false) in both runtimes.

With a resize, the two paths' bilinear resizes round differently (at most one grey level per pixel,
see tests/graph/test_preprocess_folding.py), so detections are compared as boxes (IoU) and scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from edge_sdk.core.errors import ModelError
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec, frame_feed
from edge_sdk.core.results import Result
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.pipeline.loop import run_inline
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile

from ..conftest import ASTRONAUT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

DETECTOR_POSTPROCESS = {"type": "ssd", "score_threshold": 0.5, "labels": ["person"]}


def detector_config(folder: Path, model: Path, sources: list[dict[str, Any]], **fields: Any) -> PipelineConfig:
    document = {
        "name": "folded",
        "model": {"path": str(model)},
        "sources": sources,
        "postprocess": DETECTOR_POSTPROCESS,
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({**document, **fields}, sort_keys=False), encoding="utf-8")
    return load_pipeline(path)


def best_box(result: dict[str, Any]) -> tuple[np.ndarray, float] | None:
    if not result["detections"]:
        return None
    best = max(result["detections"], key=lambda d: d["score"])
    return np.asarray(best["box"], dtype=np.float64), float(best["score"])


def iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.prod(np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None))
    return float(inter / (np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2]) - inter))


def assert_same_people(folded: list[dict[str, Any]], unfused: list[dict[str, Any]]) -> None:
    """Frame by frame: the best person box in frame pixels agrees, when both paths find one."""
    assert len(folded) == len(unfused), "both runs see every frame"
    overlaps = []
    for mine, theirs in zip(folded, unfused, strict=True):
        a, b = best_box(mine), best_box(theirs)
        if a is None or b is None:
            continue  # a score at the 0.5 threshold may fall either side of it
        overlaps.append(iou(a[0], b[0]))
        # Where two anchors score alike, a pixel's rounding can make NMS keep the neighbour: IoU > 0.75.
        assert overlaps[-1] > 0.75, f"frame {mine['frame']}: the same person in frame pixels, {a[0]} vs {b[0]}"
        assert abs(a[1] - b[1]) < 0.05, f"frame {mine['frame']}: the same score, {a[1]} vs {b[1]}"
    assert len(overlaps) >= len(folded) * 0.8, "the person is found in most frames by both paths"
    assert np.median(overlaps) > 0.95, f"boxes agree closely in most frames: {overlaps}"


def test_prepare_models_when_fold_is_on_the_engine_takes_raw_bgr_frames(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given the detector with a folded 300x300 resize, and the same pipeline with fold: false
    sources = [{"uri": str(small_video)}]
    folded = detector_config(tmp_path, demo_model, sources, preprocess={"resize": [300, 300]})
    unfused = detector_config(tmp_path, demo_model, sources, preprocess={"resize": [300, 300], "fold": False})

    # when
    folded_input = prepare_models(folded, cpu_profile, engine_cache).engine_input
    unfused_input = prepare_models(unfused, cpu_profile, engine_cache).engine_input

    # then
    assert (folded_input.name, folded_input.dtype.name) == ("frame", "uint8"), "raw uint8 frames go in"
    assert folded_input.shape[1:] == ("frame_height", "frame_width", 3), "of any size, channels last"
    assert unfused_input.name == "image_tensor:0", "fold: false keeps the model's own input"


@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
def test_run_inline_when_preprocessing_is_folded_finds_the_people_numpy_preprocessing_finds(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    resize_mode: str,
) -> None:
    # given the detector over the video, resized to 300x300 in the engine graph or in numpy
    preprocess = {"resize": [300, 300], "resize_mode": resize_mode}
    runs: dict[bool, list[dict[str, Any]]] = {}
    for fold in (True, False):
        folder = tmp_path / f"fold-{fold}"
        folder.mkdir()
        config = detector_config(
            folder, demo_model, [{"uri": str(small_video)}], preprocess={**preprocess, "fold": fold}
        )
        results: list[Result] = []

        # when
        run_inline(config, cpu_profile, engine_cache, on_result=results.append)
        runs[fold] = [result.to_dict() for result in results]

    # then (letterbox pads the 320x240 frames top and bottom: boxes must come back to frame pixels)
    assert_same_people(runs[True], runs[False])


def test_runtime_when_preprocessing_is_folded_batches_raw_frames_of_two_sizes_like_numpy_preprocessing(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given two sources of different sizes (320x240 video, 640x480 camera), batches of 2, letterboxed
    sources = [
        {"uri": str(small_video), "name": "video"},
        {"uri": f"synthetic://?image={ASTRONAUT}&frames=12&size=640x480", "name": "camera"},
    ]
    runtime = {"batch_size": 2, "batch_timeout_ms": 20, "inference_workers": 1, "stats_interval_s": 0.2}
    runs: dict[bool, list[dict[str, Any]]] = {}
    for fold in (True, False):
        folder = tmp_path / f"fold-{fold}"
        folder.mkdir()
        config = detector_config(
            folder,
            demo_model,
            sources,
            preprocess={"resize": [300, 300], "resize_mode": "letterbox", "fold": fold},
            sinks=[{"type": "jsonl", "path": "results.jsonl"}],
            runtime=runtime,
        )

        # when
        run_pipeline(config, cpu_profile, engine_cache)
        lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
        runs[fold] = sorted((json.loads(line) for line in lines), key=lambda r: (r["source"], r["frame"]))

    # then
    assert [(r["source"], r["frame"]) for r in runs[True]] == [(r["source"], r["frame"]) for r in runs[False]]
    assert_same_people(runs[True], runs[False])


# --- the feed: what the inference worker does to a frame before the engine ---------------------------

RAW_INPUT = TensorMeta("frame", np.dtype(np.uint8), ("N", "frame_height", "frame_width", 3))


def test_frame_feed_when_fold_is_on_hands_over_the_frame_itself_and_places_it_like_the_preprocessor() -> None:
    # given letterbox preprocessing folded into an engine that takes raw frames
    spec = PreprocessSpec(resize=(300, 300), resize_mode="letterbox")
    frame = np.zeros((480, 640, 3), np.uint8)

    # when
    feed = frame_feed(spec, RAW_INPUT)
    batch = feed(frame)

    # then
    assert batch.shape == (1, 480, 640, 3) and np.shares_memory(batch, frame), "the frame goes in uncopied"
    model_input = TensorMeta("images", np.dtype(np.uint8), (1, 300, 300, 3))
    assert feed.geometry(640, 480) == Preprocessor(spec, model_input).geometry(640, 480), "boxes map back alike"


def test_frame_feed_when_fold_is_off_preprocesses_in_numpy() -> None:
    # given the same preprocessing with fold: false, for a 300x300 model input
    spec = PreprocessSpec(resize=(300, 300), fold=False)
    model_input = TensorMeta("images", np.dtype(np.uint8), (1, 300, 300, 3))

    # when
    batch = frame_feed(spec, model_input)(np.zeros((480, 640, 3), np.uint8))

    # then
    assert batch.shape == (1, 300, 300, 3), "the worker resizes the frame itself"


def test_frame_feed_when_fold_is_on_but_the_engine_takes_tensors_says_what_it_expected() -> None:
    # given an engine input that was not folded (float NCHW)
    engine_input = TensorMeta("images", np.dtype(np.float32), ("N", 3, 224, 224))

    # when
    with pytest.raises(ModelError) as caught:
        frame_feed(PreprocessSpec(dtype="float32", layout="nchw", resize=(224, 224)), engine_input)

    # then
    assert "raw frames" in str(caught.value) and "images: float32" in str(caught.value), "names both sides"
