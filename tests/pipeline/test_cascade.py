"""Cascade: a real classifier engine (tools/harness/onnx_models.py) run on crops of the primary detections."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ModelError
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.core.results import Classification, Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.pipeline.cascade import Cascade, CascadeSpec, NoCascade
from edge_sdk.postprocess.classification import ClassificationSpec
from edge_sdk.profiles import DeviceProfile

BGR_RED, BGR_BLUE, GREY = (0, 0, 255), (255, 0, 0), (60, 60, 60)
RED_BOX, BLUE_BOX = (20, 20, 70, 80), (120, 30, 180, 90)
COLOURS = ClassificationSpec(type="classification", output="scores", labels=["red", "green", "blue"])


class CountingRunner(EngineRunner):
    """The real runner, recording the batch size of every call."""

    def __init__(self, runner: EngineRunner):
        self.runner = runner
        self.batches: list[int] = []

    def activate(self) -> None:
        self.runner.activate()

    def deactivate(self) -> None:
        self.runner.deactivate()

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self.runner.inputs

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return self.runner.outputs

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.batches.append(len(next(iter(feed.values()))))
        return self.runner.infer(feed)


def open_engine(model: Path, profile: DeviceProfile, cache: EngineCache) -> Iterator[CountingRunner]:
    with prepare_engine(model, profile, cache=cache).open() as runner:
        yield CountingRunner(runner)


@pytest.fixture
def mean_classifier(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> Iterator[CountingRunner]:
    """uint8 NHWC, any batch and size; class 0 for red-heavy crops, 1 green, 2 blue."""
    yield from open_engine(tiny_models["uint8_mean_classifier"], cpu_profile, engine_cache)


@pytest.fixture
def batch1_classifier(
    tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> Iterator[CountingRunner]:
    """float32 NCHW [1, 3, 8, 8] -> logits [1, 4]: a model that takes one image per call."""
    yield from open_engine(tiny_models["float_classifier_batch1"], cpu_profile, engine_cache)


def two_patches() -> np.ndarray:
    """A 200x120 grey BGR frame with a red patch and a blue patch."""
    image = np.full((120, 200, 3), GREY, dtype=np.uint8)
    image[RED_BOX[1] : RED_BOX[3], RED_BOX[0] : RED_BOX[2]] = BGR_RED
    image[BLUE_BOX[1] : BLUE_BOX[3], BLUE_BOX[0] : BLUE_BOX[2]] = BGR_BLUE
    return image


def detections_result(*boxes: tuple[tuple[int, int, int, int], float, str]) -> Result:
    frame = FrameMeta(source="cam", index=9, timestamp=2.0, width=200, height=120)
    detections = tuple(
        Detection(float(x1), float(y1), float(x2), float(y2), score, 0, label)
        for (x1, y1, x2, y2), score, label in boxes
    )
    return Result(frame=frame, detections=detections, classifications=(Classification(7, "scene", 0.5),))


def cascade_spec(**fields: Any) -> CascadeSpec:
    fields.setdefault("preprocess", PreprocessSpec(resize=(16, 16)))
    return CascadeSpec(model=Path("colours.onnx"), postprocess=COLOURS, **fields)


def top_labels(result: Result) -> list[str | None]:
    return [d.classifications[0].label if d.classifications else None for d in result.detections]


def test_cascade_when_boxes_cover_red_and_blue_patches_classifies_each_by_its_colour(
    mean_classifier: CountingRunner,
) -> None:
    # given
    cascade = Cascade(cascade_spec(), mean_classifier)
    result = detections_result((RED_BOX, 0.9, "car"), (BLUE_BOX, 0.8, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert [d.classifications[0].class_id for d in classified.detections] == [0, 2], (
        "the red box is class 0 (red), the blue box class 2 (blue)"
    )
    assert top_labels(classified) == ["red", "blue"], "classes are named from the classifier's labels"
    assert classified.detections[0].classifications[0].score == pytest.approx(1.0), (
        "a pure red crop has a mean red of 255/255"
    )
    assert mean_classifier.batches == [2], "a model with a dynamic batch classifies every crop in one call"
    assert [(d.x1, d.y1, d.x2, d.y2, d.label) for d in classified.detections] == [
        (d.x1, d.y1, d.x2, d.y2, d.label) for d in result.detections
    ], "the boxes themselves are unchanged"
    assert (classified.frame, classified.classifications) == (result.frame, result.classifications), (
        "the rest of the result is carried over"
    )
    assert all(d.classifications == () for d in result.detections), "the input result is left as it was"


def test_cascade_when_crops_differ_in_size_and_are_not_resized_runs_them_one_by_one(
    mean_classifier: CountingRunner,
) -> None:
    # given no resize: each crop goes in at its own size (50x60 and 60x60)
    cascade = Cascade(cascade_spec(preprocess=PreprocessSpec()), mean_classifier)
    result = detections_result((RED_BOX, 0.9, "car"), (BLUE_BOX, 0.8, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert top_labels(classified) == ["red", "blue"], "each crop is classified by its colour"
    assert mean_classifier.batches == [1, 1], "crops of different sizes cannot share a batch"


def test_cascade_when_the_model_takes_one_image_per_call_classifies_crop_by_crop(
    batch1_classifier: CountingRunner,
) -> None:
    # given a classifier with a fixed batch of 1 and float input
    preprocess = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32", scale=1 / 255)
    spec = CascadeSpec(
        model=Path("b1.onnx"),
        preprocess=preprocess,
        postprocess=ClassificationSpec(type="classification", output="logits", top_k=4, softmax=True),
    )
    cascade = Cascade(spec, batch1_classifier)
    image = two_patches()
    result = detections_result((RED_BOX, 0.9, "car"), (BLUE_BOX, 0.8, "car"))
    to_tensor = Preprocessor(preprocess, batch1_classifier.inputs[0])
    expected = [
        np.argsort(-batch1_classifier.runner.infer({"images": to_tensor(image[y1:y2, x1:x2])})["logits"][0]).tolist()
        for x1, y1, x2, y2 in (RED_BOX, BLUE_BOX)
    ]
    batch1_classifier.batches.clear()

    # when
    classified = cascade(result, image)

    # then
    assert batch1_classifier.batches == [1, 1], "a fixed batch of 1 means one call per crop"
    assert [[c.class_id for c in d.classifications] for d in classified.detections] == expected, (
        "each box gets the classes the model gives its crop, best first"
    )


def test_cascade_when_labels_are_set_classifies_only_those_detections(mean_classifier: CountingRunner) -> None:
    # given a person on the red patch and a dog on the blue one
    cascade = Cascade(cascade_spec(labels=["person"]), mean_classifier)
    result = detections_result((RED_BOX, 0.9, "person"), (BLUE_BOX, 0.95, "dog"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert top_labels(classified) == ["red", None], "only detections with a listed label are classified"


def test_cascade_when_a_box_is_smaller_than_min_size_skips_it(mean_classifier: CountingRunner) -> None:
    # given min_size 55: the red box is 50 wide, the blue one 60x60
    cascade = Cascade(cascade_spec(min_size=55), mean_classifier)
    result = detections_result((RED_BOX, 0.9, "car"), (BLUE_BOX, 0.8, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert top_labels(classified) == [None, "blue"], "a box narrower than min_size is not classified"


def test_cascade_when_there_are_more_boxes_than_max_crops_classifies_the_best_scoring(
    mean_classifier: CountingRunner,
) -> None:
    # given the blue detection scores higher than the red one
    cascade = Cascade(cascade_spec(max_crops=1), mean_classifier)
    result = detections_result((RED_BOX, 0.6, "car"), (BLUE_BOX, 0.9, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert top_labels(classified) == [None, "blue"], "max_crops keeps the best-scoring detections"
    assert mean_classifier.batches == [1], "only the chosen crop reaches the engine"


def test_cascade_when_padding_is_set_widens_the_crop_around_the_box(mean_classifier: CountingRunner) -> None:
    # given a small red square (20x20) in the middle of a large blue area
    image = np.full((120, 200, 3), BGR_BLUE, dtype=np.uint8)
    image[50:70, 90:110] = BGR_RED
    result = detections_result(((90, 50, 110, 70), 0.9, "car"))

    # when
    tight = Cascade(cascade_spec(), mean_classifier)(result, image)
    padded = Cascade(cascade_spec(padding=1.0), mean_classifier)(result, image)

    # then
    assert top_labels(tight) == ["red"], "without padding the crop is the red square"
    assert top_labels(padded) == ["blue"], (
        "padding 1.0 grows the crop by the box size on every side (60x60), so blue surroundings dominate"
    )


def test_cascade_when_a_box_lies_outside_the_image_leaves_it_unclassified(mean_classifier: CountingRunner) -> None:
    # given a detection past the right edge of the 200-pixel-wide frame, and one on the red patch
    cascade = Cascade(cascade_spec(), mean_classifier)
    result = detections_result(((210, 20, 240, 60), 0.9, "car"), (RED_BOX, 0.8, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert top_labels(classified) == [None, "red"], "a box with nothing inside the image is skipped, not an error"


def test_cascade_when_nothing_is_selected_returns_the_result_unchanged(mean_classifier: CountingRunner) -> None:
    # given
    cascade = Cascade(cascade_spec(labels=["person"]), mean_classifier)
    result = detections_result((RED_BOX, 0.9, "car"))

    # when
    classified = cascade(result, two_patches())

    # then
    assert classified is result, "no box to classify means the same result"
    assert mean_classifier.batches == [], "and no engine call"


def test_cascade_when_the_classifier_lacks_the_named_output_raises_model_error(mean_classifier: CountingRunner) -> None:
    # given a spec reading output 'probs' from a model whose output is 'scores'
    spec = CascadeSpec(
        model=Path("colours.onnx"),
        preprocess=PreprocessSpec(resize=(16, 16)),
        postprocess=ClassificationSpec(type="classification", output="probs"),
    )

    # when
    with pytest.raises(ModelError) as caught:
        Cascade(spec, mean_classifier)

    # then
    assert "probs" in str(caught.value) and "scores" in str(caught.value), (
        "the mismatch is reported when the cascade is built, naming both outputs"
    )


def test_cascade_spec_when_read_from_a_pipeline_mapping_validates_every_field() -> None:
    # given the cascade: section of a pipeline file
    section = {
        "model": "models/colours.onnx",
        "precision": "fp16",
        "preprocess": {"resize": [16, 16]},
        "postprocess": {"type": "classification", "output": "scores", "labels": ["red", "green", "blue"]},
        "labels": ["person"],
        "min_size": 24,
        "max_crops": 8,
        "padding": 0.1,
    }

    # when
    spec = CascadeSpec.model_validate(section)

    # then
    assert (spec.model, spec.precision, spec.preprocess.resize) == (Path("models/colours.onnx"), "fp16", (16, 16)), (
        "paths, precision and preprocessing are read as typed values"
    )
    assert (spec.labels, spec.min_size, spec.max_crops, spec.padding) == (["person"], 24, 8, 0.1), (
        "the crop selection settings are read as given"
    )
    with pytest.raises(ValidationError, match="max_crop"):
        CascadeSpec.model_validate({**section, "max_crop": 3})


def test_no_cascade_when_called_passes_the_result_through() -> None:
    # given a pipeline without a cascade
    result = detections_result((RED_BOX, 0.9, "car"))

    # when
    passed = NoCascade()(result, two_patches())

    # then
    assert passed is result, "the null cascade changes nothing, so the runtime needs no None checks"
