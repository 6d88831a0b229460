"""`edge-sdk detect MODEL SOURCE`: a model on a video or an image folder without a pipeline file,
the line saying what it guessed, the pipeline file it saves, and a model it cannot read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ASTRONAUT
from tools.harness import onnx_models

from .conftest import Run

pytestmark = pytest.mark.slow  # multi-process pipeline runs: not in make test-fast


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def detections(path: Path) -> list[tuple[int, list[tuple[str, float, list[float]]]]]:
    """Per frame: its index and its detections (label, score, box), what a user compares."""
    return [(row["frame"], [(d["label"], d["score"], d["box"]) for d in row["detections"]]) for row in rows(path)]


@pytest.fixture
def colour_yolo(tmp_path: Path) -> Path:
    return onnx_models.colour_yolov8(tmp_path / "models" / "colour_yolov8.onnx")


def test_detect_when_run_on_the_demo_video_with_the_shipped_detector_finds_the_person_in_most_frames(
    edge_sdk: Run, tmp_path: Path, demo_model: Path, small_video: Path
) -> None:
    # when
    code, out, err = edge_sdk("detect", demo_model, small_video, "--labels", "person", "--out", tmp_path / "out")
    # then it says what it guessed first, then the run's summary, and writes both outputs
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("model: ?x?x?x3 uint8 NHWC, outputs look like SSD detections"), out
    assert "-> ssd post-processing (class names given)" in lines[0]
    assert any(line.startswith("ssdlite_mobilenet_v2_person on ") and " 24 frames in " in line for line in lines), out
    assert f"outputs in {tmp_path / 'out'}: annotated.mp4, results.jsonl" in out
    found = rows(tmp_path / "out" / "results.jsonl")
    with_person = [row for row in found if any(d["label"] == "person" for d in row["detections"])]
    assert len(found) == 24 and len(with_person) >= 0.9 * len(found), "the astronaut is found in most frames"
    assert (tmp_path / "out" / "annotated.mp4").stat().st_size > 0


def test_detect_saved_pipeline_when_run_gives_the_same_detections(
    edge_sdk: Run, tmp_path: Path, colour_yolo: Path, small_video: Path
) -> None:
    # given a detect run that saves its pipeline
    saved = tmp_path / "pipelines" / "colour.yaml"
    code, out, err = edge_sdk("detect", colour_yolo, small_video, "--out", tmp_path / "out", "--save-pipeline", saved)
    assert code == 0, err
    assert f"pipeline written to {saved}" in out
    by_detect = detections(tmp_path / "out" / "results.jsonl")
    shutil.move(tmp_path / "out", tmp_path / "by_detect")
    # when the saved file runs
    code, out, err = edge_sdk("run", saved)
    # then it finds the same boxes, frame for frame
    assert code == 0, err
    assert detections(tmp_path / "out" / "results.jsonl") == by_detect
    assert sum(len(found) for _, found in by_detect) > 0, "the colour detector finds the orange suit as red"
    assert saved.read_text(encoding="utf-8").startswith(f"# Written by edge-sdk detect {colour_yolo} {small_video}")


def test_detect_when_given_an_image_folder_and_json_prints_the_guess_on_stderr_and_one_json_document(
    edge_sdk: Run, tmp_path: Path, colour_yolo: Path
) -> None:
    # given a folder of two photos
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.jpg", "b.jpg"):
        shutil.copy(ASTRONAUT, folder / name)
    # when
    code, out, err = edge_sdk("detect", colour_yolo, folder, "--out", tmp_path / "out", "--json")
    # then
    assert code == 0, err
    summary = json.loads(out)
    assert summary["frames"] == 2 and summary["outputs"] == [
        str(tmp_path / "out" / "annotated.mp4"),
        str(tmp_path / "out" / "results.jsonl"),
    ]
    assert "outputs look like a YOLOv8 head with 3 classes -> yolo v8 post-processing" in err
    found = rows(tmp_path / "out" / "results.jsonl")
    assert [row["source"] for row in found] == ["photos", "photos"]
    assert all(any(d["label"] == "red" for d in row["detections"]) for row in found)


def feature_map_model(path: Path) -> Path:
    """float32 [1, 3, 32, 32] -> a Conv's feature map [1, 8, 32, 32]: no detector, no classifier."""
    weights = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["features"], pads=[1, 1, 1, 1])],
        "feature_map",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, 32, 32])],
        [weights],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(onnx_models.make_model(graph).SerializeToString())
    return path


def test_detect_when_the_outputs_fit_no_known_head_says_what_it_found_and_exits_2(
    edge_sdk: Run, tmp_path: Path, small_video: Path
) -> None:
    model = feature_map_model(tmp_path / "backbone.onnx")
    code, out, err = edge_sdk("detect", model, small_video, "--out", tmp_path / "out")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: cannot tell how to read this model's outputs"), err
    assert "features float32 [1, 8, 32, 32]" in err and "docs/models.md" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists(), "nothing is written for a model it cannot read"


def test_detect_when_labels_name_a_file_that_is_not_there_says_so_instead_of_using_it_as_a_name(
    edge_sdk: Run, demo_model: Path, small_video: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, _out, err = edge_sdk("detect", demo_model, small_video, "--labels", tmp_path / "coco.names", "--out", out)
    assert code == 2 and "coco.names: no such file" in err, err
    assert not out.exists(), "nothing runs"
