"""The in-process pipeline run end to end with real OpenCV and ONNX Runtime, and its preprocessing."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.core.results import Result
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.loop import run_inline
from edge_sdk.profiles import DeviceProfile

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

VIDEO_FRAMES = 24
DETECTOR_POSTPROCESS = {"type": "ssd", "score_threshold": 0.5, "labels": ["person"]}
CLASSIFIER_PREPROCESS = {"dtype": "float32", "layout": "nchw", "resize": [8, 8], "scale": 1 / 255}


def pipeline_file(folder: Path, **fields: Any) -> PipelineConfig:
    """Write a pipeline YAML file into `folder` and load it the way the CLI does."""
    document = {"name": "test", **fields}
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return load_pipeline(path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def count_video_frames(path: Path) -> tuple[int, tuple[int, int] | None]:
    capture = import_cv2().VideoCapture(str(path))
    frames, size = 0, None
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames, size = frames + 1, (image.shape[1], image.shape[0])
    capture.release()
    return frames, size


def write_solid_png(path: Path, bgr: tuple[int, int, int]) -> Path:
    image = np.empty((48, 64, 3), dtype=np.uint8)
    image[:] = bgr
    assert import_cv2().imwrite(str(path), image), "test setup: OpenCV must write the PNG"
    return path


# --- the demo detector over a video -------------------------------------------------------------------


def test_run_inline_when_detector_reads_the_video_finds_the_person_in_most_frames(
    tmp_path: Path, small_video: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given the demo detector over a 24-frame video of the astronaut, with jsonl and video sinks
    config = pipeline_file(
        tmp_path,
        model={"path": str(demo_model)},
        sources=[{"uri": str(small_video), "name": "astronaut"}],
        postprocess=DETECTOR_POSTPROCESS,
        sinks=[{"type": "jsonl", "path": "out/results.jsonl"}, {"type": "video", "path": "out/annotated.mp4"}],
    )

    # when
    summary = run_inline(config, cpu_profile, engine_cache)

    # then
    assert summary.frames == VIDEO_FRAMES, "every frame of the video goes through the pipeline"
    assert summary.sink_failures == {}, "no sink fails on a normal run"
    lines = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert len(lines) == VIDEO_FRAMES, "one result line per frame"
    assert [line["frame"] for line in lines] == list(range(VIDEO_FRAMES)), "frames are reported in order, 0..23"
    assert {line["source"] for line in lines} == {"astronaut"}, "each line names its source"
    with_person = [
        line for line in lines if any(d["label"] == "person" and d["score"] >= 0.5 for d in line["detections"])
    ]
    assert len(with_person) >= 20, f"the astronaut is found in most frames, got {len(with_person)} of 24"
    frames, size = count_video_frames(tmp_path / "out" / "annotated.mp4")
    assert (frames, size) == (VIDEO_FRAMES, (320, 240)), "the annotated video has every frame at the source size"


def test_run_inline_when_max_frames_is_set_stops_after_that_many(
    tmp_path: Path, small_video: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given
    config = pipeline_file(
        tmp_path,
        model={"path": str(demo_model)},
        sources=[{"uri": str(small_video), "max_frames": 5}],
        postprocess=DETECTOR_POSTPROCESS,
        sinks=[{"type": "jsonl", "path": "results.jsonl"}],
    )

    # when
    summary = run_inline(config, cpu_profile, engine_cache)

    # then
    assert summary.frames == 5, "max_frames caps the frames taken from the source"
    assert [line["frame"] for line in read_jsonl(tmp_path / "results.jsonl")] == [0, 1, 2, 3, 4], (
        "the first five frames are the ones processed"
    )


def test_run_inline_when_two_sources_are_given_reports_results_for_both(
    tmp_path: Path,
    small_video: Path,
    demo_model: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    astronaut_bgr: np.ndarray,
) -> None:
    # given a video and a synthetic camera, each named
    import_cv2().imwrite(str(tmp_path / "still.jpg"), astronaut_bgr)
    config = pipeline_file(
        tmp_path,
        model={"path": str(demo_model)},
        sources=[
            {"uri": str(small_video), "name": "video", "max_frames": 4},
            {"uri": "synthetic://?image=still.jpg&frames=3&size=160x120", "name": "virtual"},
        ],
        postprocess=DETECTOR_POSTPROCESS,
        sinks=[{"type": "jsonl", "path": "results.jsonl"}],
    )

    # when
    summary = run_inline(config, cpu_profile, engine_cache)

    # then
    lines = read_jsonl(tmp_path / "results.jsonl")
    by_source = {name: [line for line in lines if line["source"] == name] for name in ("video", "virtual")}
    assert [line["frame"] for line in by_source["video"]] == [0, 1, 2, 3], "the video contributes its four frames"
    assert [line["frame"] for line in by_source["virtual"]] == [0, 1, 2], "the synthetic camera its three"
    assert {(line["width"], line["height"]) for line in by_source["virtual"]} == {(160, 120)}, (
        "each result carries the size of its own source's frames"
    )
    assert summary.frames == 7, "the summary counts frames of every source"


def test_run_inline_when_stop_is_set_from_on_result_stops_early(
    tmp_path: Path, small_video: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a callback that asks the run to stop after the third result
    config = pipeline_file(
        tmp_path,
        model={"path": str(demo_model)},
        sources=[{"uri": str(small_video)}],
        postprocess=DETECTOR_POSTPROCESS,
        sinks=[{"type": "jsonl", "path": "results.jsonl"}],
    )
    stop = threading.Event()
    seen: list[Result] = []

    def on_result(result: Result) -> None:
        seen.append(result)
        if len(seen) == 3:
            stop.set()

    # when
    summary = run_inline(config, cpu_profile, engine_cache, stop=stop, on_result=on_result)

    # then
    assert summary.frames == 3, "no frame is processed after stop is set"
    assert [r.frame.index for r in seen] == [0, 1, 2], "the callback saw the first three frames"
    assert len(read_jsonl(tmp_path / "results.jsonl")) == 3, "sinks got exactly the frames that were processed"


def test_run_inline_when_stop_is_set_with_several_sources_processes_no_further_frame(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given three cameras and a callback that asks the run to stop after the very first result
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        sources=[{"uri": "synthetic://?frames=10&size=32x24", "name": name} for name in ("a", "b", "c")],
        postprocess={"type": "classification", "output": "scores"},
    )
    stop = threading.Event()
    seen: list[Result] = []

    def on_result(result: Result) -> None:
        seen.append(result)
        stop.set()

    # when
    summary = run_inline(config, cpu_profile, engine_cache, stop=stop, on_result=on_result)

    # then
    assert [(r.frame.source, r.frame.index) for r in seen] == [("a", 0)], "no result arrives after stop is set"
    assert summary.frames == 1, "only the frame before the stop is counted"


def test_run_inline_when_a_sink_fails_reports_it_and_the_others_get_every_frame(
    tmp_path: Path,
    small_video: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # given a video sink whose folder is a regular file, next to a jsonl sink
    (tmp_path / "blocker").write_text("a file, not a folder")
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        sources=[{"uri": str(small_video)}],
        postprocess={"type": "classification", "output": "scores"},
        sinks=[{"type": "video", "path": "blocker/annotated.mp4"}, {"type": "jsonl", "path": "results.jsonl"}],
    )

    # when
    summary = run_inline(config, cpu_profile, engine_cache)

    # then
    assert summary.frames == VIDEO_FRAMES, "a failing sink does not stop the run"
    assert len(summary.sink_failures) == 1, "exactly one sink is reported as failed"
    (name,) = summary.sink_failures
    assert "annotated.mp4" in name, "the failed sink is named by its output path"
    assert [line["frame"] for line in read_jsonl(tmp_path / "results.jsonl")] == list(range(VIDEO_FRAMES)), (
        "the healthy sink still receives every frame"
    )


def test_run_inline_when_model_input_names_a_missing_input_raises_config_error_listing_inputs(
    tmp_path: Path, small_video: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given
    config = pipeline_file(
        tmp_path,
        model={"path": str(demo_model), "input": "pixels"},
        sources=[{"uri": str(small_video)}],
        postprocess=DETECTOR_POSTPROCESS,
    )

    # when
    with pytest.raises(ConfigError) as caught:
        run_inline(config, cpu_profile, engine_cache)

    # then
    message = str(caught.value)
    assert "'pixels'" in message, "the error names the input the pipeline asked for"
    assert "image_tensor:0" in message, "the error lists the inputs the model has"


# --- preprocessing against tiny classifiers -----------------------------------------------------------


def test_run_inline_when_float_model_gets_default_uint8_preprocess_says_it_expects_float32(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a float32 NCHW classifier and no preprocess section
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["float_classifier"])},
        sources=[{"uri": "synthetic://?frames=2&size=64x48"}],
        postprocess={"type": "classification", "output": "logits"},
    )

    # when
    with pytest.raises(ModelError) as caught:
        run_inline(config, cpu_profile, engine_cache)

    # then
    message = str(caught.value)
    assert "expects float32" in message, "the error says what the model expects"
    assert "uint8" in message and "preprocess.dtype" in message, "the error says what is fed and what to set"


def test_run_inline_when_fixed_size_model_has_no_resize_says_which_resize_to_set(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given float32 NCHW preprocessing without a resize
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["float_classifier"])},
        preprocess={"dtype": "float32", "layout": "nchw"},
        sources=[{"uri": "synthetic://?frames=2&size=64x48"}],
        postprocess={"type": "classification", "output": "logits"},
    )

    # when
    with pytest.raises(ModelError) as caught:
        run_inline(config, cpu_profile, engine_cache)

    # then
    assert "preprocess.resize: [8, 8]" in str(caught.value), "the error tells the exact setting to add"


@pytest.mark.parametrize("model", ["float_classifier", "float_classifier_batch1"])
def test_run_inline_when_float_model_is_preprocessed_to_fit_reports_top_k_classes(
    tmp_path: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    model: str,
) -> None:
    # given a preprocess section that matches the model: float32, NCHW, 8x8
    labels = ["a", "b", "c", "d"]
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models[model])},
        preprocess=CLASSIFIER_PREPROCESS,
        sources=[{"uri": "synthetic://?frames=3&size=64x48"}],
        postprocess={"type": "classification", "output": "logits", "top_k": 3, "softmax": True, "labels": labels},
    )
    results: list[Result] = []

    # when
    summary = run_inline(config, cpu_profile, engine_cache, on_result=results.append)

    # then
    assert summary.frames == 3, "every synthetic frame is classified"
    for result in results:
        classes = result.classifications
        assert len(classes) == 3, "top_k: 3 gives three classes per frame"
        assert [c.score for c in classes] == sorted((c.score for c in classes), reverse=True), "best class first"
        assert all(c.label == labels[c.class_id] for c in classes), "classes carry their labels"
        assert all(0.0 <= c.score <= 1.0 for c in classes), "softmax scores are probabilities"


@pytest.mark.parametrize(("color", "expected"), [("rgb", "red"), ("bgr", "blue")])
def test_run_inline_when_uint8_classifier_sees_a_red_image_classifies_by_channel_order(
    tmp_path: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    color: str,
    expected: str,
) -> None:
    # given a pure red still (BGR 0,0,255) behind a synthetic camera, and a model whose class 0 is channel 0
    write_solid_png(tmp_path / "red.png", (0, 0, 255))
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        preprocess={"color": color},
        sources=[{"uri": "synthetic://?image=red.png&frames=2&size=32x24"}],
        postprocess={"type": "classification", "output": "scores", "labels": ["red", "green", "blue"]},
    )
    results: list[Result] = []

    # when
    run_inline(config, cpu_profile, engine_cache, on_result=results.append)

    # then
    assert len(results) == 2, "both frames are classified"
    for result in results:
        (top,) = result.classifications
        assert top.label == expected, f"with color: {color} the red frame reaches the model as '{expected}' first"
        assert top.score == pytest.approx(1.0), "a pure colour fills its channel completely"


# --- Preprocessor -------------------------------------------------------------------------------------


def test_preprocessor_when_float_nchw_normalised_matches_a_numpy_reference_exactly() -> None:
    # given an 8x8 BGR frame and ImageNet-style normalisation
    rng = np.random.default_rng(11)
    frame = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    spec = PreprocessSpec(resize=(8, 8), color="rgb", layout="nchw", dtype="float32", scale=1 / 255, mean=mean, std=std)
    model_input = TensorMeta("images", np.dtype(np.float32), ("N", 3, 8, 8))

    # when
    tensor = Preprocessor(spec, model_input)(frame)

    # then
    rgb = frame[:, :, ::-1].astype(np.float32)
    normalised = (rgb * np.float32(1 / 255) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    reference = normalised.transpose(2, 0, 1)[np.newaxis]
    assert tensor.dtype == np.float32 and tensor.shape == (1, 3, 8, 8), "a float32 NCHW batch of one"
    assert np.array_equal(tensor, reference), "RGB flip, scale, mean, std and NCHW give exactly the reference"
    assert tensor.flags["C_CONTIGUOUS"], "the tensor is contiguous, ready for the runtime"


def test_preprocessor_when_uint8_nhwc_rgb_flips_channels_and_adds_a_batch_axis() -> None:
    # given
    frame = np.random.default_rng(5).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    model_input = TensorMeta("frames", np.dtype(np.uint8), ("N", "H", "W", 3))

    # when
    tensor = Preprocessor(PreprocessSpec(), model_input)(frame)

    # then
    assert tensor.dtype == np.uint8 and tensor.shape == (1, 6, 10, 3), "uint8 NHWC at the frame's own size"
    assert np.array_equal(tensor[0], frame[:, :, ::-1]), "channels arrive in RGB order"


def test_preprocessor_when_resize_is_set_gives_the_model_size() -> None:
    # given a 64x48 frame and a model taking 8x8
    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    model_input = TensorMeta("images", np.dtype(np.float32), ("N", 3, 8, 8))
    spec = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32")

    # when
    tensor = Preprocessor(spec, model_input)(frame)

    # then
    assert tensor.shape == (1, 3, 8, 8), "frames are resized to [width, height] before layout changes"


def test_preprocessor_when_resize_differs_from_the_model_size_names_both_sizes() -> None:
    # given
    model_input = TensorMeta("images", np.dtype(np.float32), ("N", 3, 8, 8))
    spec = PreprocessSpec(resize=(16, 8), layout="nchw", dtype="float32")

    # when
    with pytest.raises(ModelError) as caught:
        Preprocessor(spec, model_input)

    # then
    assert "8x8" in str(caught.value) and "16x8" in str(caught.value), "the error shows wanted and configured sizes"


def test_preprocessor_when_layout_puts_channels_on_the_wrong_axis_says_to_check_layout() -> None:
    # given an NCHW model fed NHWC
    model_input = TensorMeta("images", np.dtype(np.float32), ("N", 3, 8, 8))
    spec = PreprocessSpec(resize=(8, 8), layout="nhwc", dtype="float32")

    # when
    with pytest.raises(ModelError) as caught:
        Preprocessor(spec, model_input)

    # then
    assert "preprocess.layout" in str(caught.value), "the error points at the layout setting"
