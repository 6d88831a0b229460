"""Classification post-processing on hand-made score vectors."""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import FrameMeta
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.postprocess.classification import ClassificationPostprocessor, ClassificationSpec

FRAME = FrameMeta(source="cam", index=0, timestamp=0.0, width=64, height=48)
GEOMETRY = InputGeometry.identity(FRAME.width, FRAME.height)


def classify(scores: list[float], **spec: object) -> list[tuple[int, str, float]]:
    post = ClassificationPostprocessor(ClassificationSpec(type="classification", output="logits", **spec))
    result = post({"logits": np.asarray(scores, dtype=np.float32)}, FRAME, GEOMETRY)
    assert result.detections == (), "a classifier reports no boxes"
    return [(c.class_id, c.label, c.score) for c in result.classifications]


def test_classification_when_top_k_is_one_reports_the_best_class() -> None:
    # given / when
    classes = classify([0.1, 0.7, 0.2])

    # then
    assert classes == [(1, "1", pytest.approx(0.7))], "top_k defaults to 1: the highest score, labelled by its id"


def test_classification_when_top_k_is_three_reports_classes_best_first() -> None:
    # given / when
    classes = classify([0.1, 0.4, 0.3, 0.2], top_k=3)

    # then
    assert [c[0] for c in classes] == [1, 2, 3], "the three best classes, highest score first"
    assert [c[2] for c in classes] == pytest.approx([0.4, 0.3, 0.2]), "each class keeps its own score"


def test_classification_when_top_k_exceeds_the_classes_reports_every_class() -> None:
    # given / when
    classes = classify([0.2, 0.8], top_k=5)

    # then
    assert [c[0] for c in classes] == [1, 0], "asking for more classes than exist gives all of them"


def test_classification_when_softmax_is_set_turns_logits_into_probabilities() -> None:
    # given
    logits = np.array([2.0, 1.0, 0.1, -3.0])
    expected = np.exp(logits) / np.exp(logits).sum()

    # when
    classes = classify(logits.tolist(), top_k=4, softmax=True)

    # then
    assert [c[0] for c in classes] == [0, 1, 2, 3], "softmax keeps the order of the logits"
    assert [c[2] for c in classes] == pytest.approx(expected.tolist(), rel=1e-5), "scores are softmax probabilities"
    assert sum(c[2] for c in classes) == pytest.approx(1.0), "probabilities over every class sum to 1"


def test_classification_when_softmax_is_set_and_logits_are_large_stays_finite() -> None:
    # given logits large enough to overflow a naive exp()
    classes = classify([1000.0, 999.0], top_k=2, softmax=True)

    # then
    assert all(np.isfinite(c[2]) for c in classes), "softmax of large logits gives finite probabilities"
    assert classes[0][2] == pytest.approx(1 / (1 + np.exp(-1.0))), "the best class gets e/(e+1)"


def test_classification_when_labels_are_given_names_classes_by_id() -> None:
    # given / when
    classes = classify([0.1, 0.2, 0.7], top_k=3, labels=["cat", "dog"])

    # then
    assert [(c[0], c[1]) for c in classes] == [(2, "2"), (1, "dog"), (0, "cat")], (
        "a class with a label shows its label; one past the end of the labels shows its id"
    )


def test_classification_when_score_threshold_is_set_drops_classes_below_it() -> None:
    # given / when
    classes = classify([0.05, 0.6, 0.35], top_k=3, score_threshold=0.3)

    # then
    assert [c[0] for c in classes] == [1, 2], "classes scoring under the threshold are not reported"


def test_classification_when_nothing_reaches_the_threshold_reports_nothing() -> None:
    # given / when
    classes = classify([0.2, 0.3], score_threshold=0.9)

    # then
    assert classes == [], "no class reaches the threshold, so the result has none"


def test_classification_check_outputs_when_output_is_missing_raises_model_error_naming_it() -> None:
    # given
    post = build_postprocessor(ClassificationSpec(type="classification", output="probs"))
    model_outputs = [TensorMeta("logits", np.dtype(np.float32), ("N", 4))]

    # when
    with pytest.raises(ModelError) as caught:
        post.check_outputs(model_outputs)

    # then
    assert "probs" in str(caught.value), "the error names the output the post-processor wanted"
    assert "logits" in str(caught.value), "the error lists the outputs the model has"
