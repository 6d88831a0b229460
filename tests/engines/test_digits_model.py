"""The shipped digits CNN and its data (made by tools/train_digits.py), run for real with ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest

MODELS = Path(__file__).resolve().parents[2] / "models"
DIGITS_MODEL = MODELS / "digits_cnn.onnx"
INPUT_NAME = "image"
OUTPUT_NAME = "logits"
# The FP32 figure models/README.md states; training and export are deterministic, so it is exact.
HELD_OUT_SAMPLES = 539
HELD_OUT_CORRECT = 536
CALIBRATION_SAMPLES = 300


@pytest.fixture(scope="module")
def session() -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(str(DIGITS_MODEL), options, providers=["CPUExecutionProvider"])


def load_npz(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS / name) as data:
        return {key: data[key] for key in data.files}


def test_digits_model_when_run_on_held_out_data_classifies_the_stated_count(
    session: onnxruntime.InferenceSession,
) -> None:
    held_out = load_npz("digits_holdout.npz")
    (logits,) = session.run([OUTPUT_NAME], {INPUT_NAME: held_out[INPUT_NAME]})
    correct = int((logits.argmax(axis=1) == held_out["labels"]).sum())
    assert (correct, len(held_out["labels"])) == (HELD_OUT_CORRECT, HELD_OUT_SAMPLES)


def test_digits_model_when_loaded_takes_n_1_8_8_floats_and_gives_n_10_logits(
    session: onnxruntime.InferenceSession,
) -> None:
    (model_input,) = session.get_inputs()
    (model_output,) = session.get_outputs()
    assert (model_input.name, model_input.type, model_input.shape) == (INPUT_NAME, "tensor(float)", ["N", 1, 8, 8])
    assert (model_output.name, model_output.type, model_output.shape) == (OUTPUT_NAME, "tensor(float)", ["N", 10])


@pytest.mark.parametrize("batch", [1, 7])
def test_digits_model_when_fed_any_batch_size_gives_one_row_per_image(
    session: onnxruntime.InferenceSession, batch: int
) -> None:
    images = load_npz("digits_calibration.npz")[INPUT_NAME][:batch]
    (logits,) = session.run([OUTPUT_NAME], {INPUT_NAME: images})
    assert logits.shape == (batch, 10)
    assert logits.dtype == np.float32


@pytest.mark.parametrize(
    ("name", "samples"), [("digits_calibration.npz", CALIBRATION_SAMPLES), ("digits_holdout.npz", HELD_OUT_SAMPLES)]
)
def test_digits_data_when_loaded_is_keyed_by_the_model_input_and_scaled_to_0_1(name: str, samples: int) -> None:
    data = load_npz(name)
    images, labels = data[INPUT_NAME], data["labels"]
    assert sorted(data) == sorted([INPUT_NAME, "labels"])
    assert (images.shape, images.dtype) == ((samples, 1, 8, 8), np.float32)
    assert images.min() >= 0.0 and images.max() <= 1.0
    # The digits' pixels are counts 0..16, divided by 16.
    np.testing.assert_array_equal(images * 16, np.round(images * 16))
    assert labels.shape == (samples,)
    assert set(np.unique(labels)) == set(range(10))
