"""A pipeline made from a model file alone (pipeline/from_model.py): what is read from the model, the
line that says it, and the pipeline file it saves."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.from_model import (
    detect_document,
    guess_model,
    pipeline_from_document,
    source_uri,
    write_pipeline_file,
)
from tests.conftest import DEMO_MODEL, REPO_ROOT
from tools.harness import onnx_models


@pytest.fixture(scope="module")
def colour_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("colour-models")
    return {
        "yolo": onnx_models.colour_yolov8(folder / "colour_yolov8.onnx"),
        "classifier": onnx_models.colour_classifier(folder / "colour_classifier.onnx"),
        "digits": REPO_ROOT / "models" / "digits_cnn.onnx",
    }


def test_guess_model_when_given_the_shipped_ssd_feeds_uint8_nhwc_rgb_at_the_size_its_graph_resizes_to() -> None:
    # given the TF SSD, whose input takes any size and whose graph resizes every image to 300x300
    guess = guess_model(DEMO_MODEL)
    pre = guess.preprocess
    assert (pre.layout, pre.dtype, pre.color, pre.resize, pre.resize_mode) == (
        "nhwc",
        "uint8",
        "rgb",
        (300, 300),
        "stretch",
    )
    assert guess.postprocess.type == "ssd" and guess.postprocess.labels == []
    assert guess.summary == (
        "model: ?x?x?x3 uint8 NHWC, outputs look like SSD detections (TF Object Detection API names) -> ssd "
        "post-processing (no class names: results carry class ids); frames resized to 300x300 (the size the SSD "
        "graph resizes to), RGB (assumed)"
    )


def test_guess_model_when_given_a_yolov8_export_letterboxes_float_nchw_and_reads_the_names_from_metadata(
    colour_models: dict[str, Path],
) -> None:
    guess = guess_model(colour_models["yolo"])
    pre, post = guess.preprocess, guess.postprocess
    assert (pre.layout, pre.dtype, pre.resize, pre.resize_mode) == ("nchw", "float32", (320, 320), "letterbox")
    assert pre.scale == pytest.approx(1 / 255)
    assert post.type == "yolo" and post.version == "v8" and post.labels == ["red", "green", "blue"]
    assert guess.summary.startswith(
        "model: 1x3x320x320 float32 NCHW, outputs look like a YOLOv8 head with 3 classes -> yolo v8 post-processing"
        " (class names from the model's metadata)"
    ), guess.summary


def test_guess_model_when_labels_are_given_they_replace_the_models_own(colour_models: dict[str, Path]) -> None:
    guess = guess_model(colour_models["classifier"], labels=["r", "g", "b"])
    assert guess.postprocess.type == "classification" and guess.postprocess.labels == ["r", "g", "b"]
    assert "(class names given)" in guess.summary
    assert guess.preprocess.resize == (64, 64) and guess.preprocess.resize_mode == "stretch"


def test_guess_model_when_the_labels_do_not_fit_the_class_count_says_so(colour_models: dict[str, Path]) -> None:
    # given the YOLO model's three classes, and two names for them
    with pytest.raises(
        ConfigError, match=r"2 class names given, but the model.s outputs look like a YOLOv8 head with 3 classes"
    ):
        guess_model(colour_models["yolo"], labels=["red", "green"])


def test_guess_model_when_the_input_has_one_channel_says_frames_have_three(colour_models: dict[str, Path]) -> None:
    with pytest.raises(ModelError, match=r"has 1 channel \(axis 1\); the SDK feeds 3-channel colour frames"):
        guess_model(colour_models["digits"])


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("0", "0"),
        ("/dev/video2", "v4l2:///dev/video2"),
        ("rtsp://cam.local/stream1", "rtsp://cam.local/stream1"),
        ("synthetic://?frames=5", "synthetic://?frames=5"),
        ("clip.mp4", "clip.mp4"),
    ],
)
def test_source_uri_when_given_what_a_user_types_gives_the_pipeline_uri(argument: str, expected: str) -> None:
    assert source_uri(argument) == expected


def test_source_uri_when_given_a_folder_reads_it_as_an_image_folder(tmp_path: Path) -> None:
    assert source_uri(str(tmp_path)) == f"images://{tmp_path}"


def test_saved_pipeline_when_loaded_back_is_the_pipeline_detect_runs(
    tmp_path: Path, colour_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a guess, a video under the working directory and a pipeline file saved in a subfolder
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clips").mkdir()
    video = tmp_path / "clips" / "door.mp4"
    video.write_bytes(b"")
    guess = guess_model(colour_models["yolo"])
    settings = {"max_frames": 7, "score_threshold": 0.4}
    in_code = pipeline_from_document(
        detect_document(guess, "clips/door.mp4", Path("out"), tmp_path, **settings), tmp_path
    )
    saved = tmp_path / "pipelines" / "door.yaml"
    # when
    write_pipeline_file(detect_document(guess, "clips/door.mp4", Path("out"), saved.parent, **settings), saved, "a\nb")
    # then the file loads to the same pipeline, and names the video relative to itself
    loaded = load_pipeline(saved)
    assert loaded.model_dump(exclude={"sources"}) == in_code.model_dump(exclude={"sources"})
    # a source URI stays as written and starts from the pipeline's folder when the source opens
    assert (loaded.base_dir / loaded.sources[0].uri).resolve() == (in_code.base_dir / in_code.sources[0].uri).resolve()
    text = saved.read_text(encoding="utf-8")
    assert text.startswith("# a\n# b\n") and "uri: ../clips/door.mp4" in text and "resize: [320, 320]" in text
    assert loaded.sources[0].max_frames == 7 and loaded.postprocess.score_threshold == 0.4
    assert [sink.path for sink in loaded.sinks] == [
        tmp_path / "out" / "annotated.mp4",
        tmp_path / "out" / "results.jsonl",
    ]
