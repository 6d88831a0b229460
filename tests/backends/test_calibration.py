"""Calibration data readers: .npz, image folders and videos, checked against the model they feed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.backends.calibration import (
    Calibration,
    Int8Settings,
    SampleSet,
    TaskSpec,
    open_calibration_data,
)
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.core.tensor_meta import TensorMeta

# What the float classifier (float32 NCHW [N, 3, 8, 8]) expects from BGR frames.
CLASSIFIER_PREPROCESS = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32", scale=1 / 255)


@pytest.fixture
def classifier(tiny_models: dict[str, Path]) -> ModelFile:
    return ModelFile.load(tiny_models["float_classifier"])


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def write_images(folder: Path, count: int, size: tuple[int, int] = (32, 24)) -> Path:
    """`count` BGR images whose pixels all equal their index, so a test can tell them apart."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        image = np.full((size[1], size[0], 3), index * 10, dtype=np.uint8)
        assert import_cv2().imwrite(str(folder / f"img_{index:02d}.png"), image)
    return folder


def images(count: int) -> np.ndarray:
    return np.random.default_rng(3).random((count, 3, 8, 8), dtype=np.float32)


# --- .npz --------------------------------------------------------------------------------------------------------


def test_npz_reader_when_arrays_are_keyed_by_input_yields_batches_of_one_with_labels(
    tmp_path: Path, classifier: ModelFile
) -> None:
    # Given 10 samples under the input's name, with labels
    data = write_npz(tmp_path / "data.npz", images=images(10), labels=np.arange(10))

    # When they are read
    reader = open_calibration_data(data, classifier)
    samples = list(reader)

    # Then every sample feeds the model's input as a batch of one, and the labels follow
    assert len(reader) == len(samples) == 10
    assert all(set(s) == {"images"} and s["images"].shape == (1, 3, 8, 8) for s in samples), "one sample per item"
    np.testing.assert_array_equal(samples[3]["images"][0], images(10)[3], err_msg="samples keep their order")
    assert reader.labels is not None and reader.labels.tolist() == list(range(10))


def test_npz_reader_when_one_array_has_another_name_feeds_the_only_input(tmp_path: Path, classifier: ModelFile) -> None:
    data = write_npz(tmp_path / "data.npz", x=images(4).astype(np.float64))
    samples = list(open_calibration_data(data, classifier))
    assert samples[0]["images"].dtype == np.float32, "float64 data is given to a float32 input as float32"
    assert len(samples) == 4


def test_npz_reader_when_limited_spreads_the_samples_and_their_labels_over_the_data(
    tmp_path: Path, classifier: ModelFile
) -> None:
    data = write_npz(tmp_path / "data.npz", images=images(10), labels=np.arange(10))
    reader = open_calibration_data(data, classifier, limit=4)
    assert len(list(reader)) == 4
    assert reader.labels is not None and reader.labels.tolist() == [0, 3, 6, 9], "first to last, evenly"


@pytest.mark.parametrize(
    ("arrays", "fragments"),
    [
        pytest.param(
            {"images": np.zeros((4, 3, 9, 8), np.float32)}, ["expected size 8 on axis 2", "(1, 3, 9, 8)"], id="shape"
        ),
        pytest.param({"images": np.zeros((4, 3, 8, 8), np.uint8)}, ["expected dtype float32, got uint8"], id="dtype"),
        pytest.param(
            {"a": images(2), "b": images(2)},
            ["expected arrays named after the model inputs ['images']", "['a', 'b']"],
            id="names",
        ),
        pytest.param(
            {"images": images(4), "labels": np.arange(3)},
            ["expected 'labels' to hold 4 integer class ids"],
            id="labels",
        ),
        pytest.param(
            {"images": np.zeros((0, 3, 8, 8), np.float32)}, ["expected at least one sample, got 0"], id="empty"
        ),
    ],
)
def test_npz_reader_when_data_does_not_fit_the_model_says_what_was_expected(
    tmp_path: Path, classifier: ModelFile, arrays: dict[str, np.ndarray], fragments: list[str]
) -> None:
    data = write_npz(tmp_path / "data.npz", **arrays)
    with pytest.raises(ConfigError) as error:
        open_calibration_data(data, classifier)
    for fragment in fragments:
        assert fragment in str(error.value), f"the error should say {fragment!r}: {error.value}"


def test_open_calibration_data_when_npz_is_not_an_archive_names_the_file(tmp_path: Path, classifier: ModelFile) -> None:
    data = tmp_path / "broken.npz"
    data.write_bytes(b"not a zip file at all")
    with pytest.raises(ConfigError, match=r"cannot read calibration data .*broken\.npz: expected an \.npz archive"):
        open_calibration_data(data, classifier)


def test_open_calibration_data_when_path_is_missing_says_what_it_accepts(tmp_path: Path, classifier: ModelFile) -> None:
    with pytest.raises(ConfigError, match=r"calibration data not found: .*nope\.npz \(expected a folder of images"):
        open_calibration_data(tmp_path / "nope.npz", classifier)


def test_open_calibration_data_when_file_kind_is_unknown_lists_the_known_kinds(
    tmp_path: Path, classifier: ModelFile
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(ConfigError, match=r"expected a folder of images, a video .* or an \.npz, got a '\.txt' file"):
        open_calibration_data(notes, classifier)


# --- Image folders -----------------------------------------------------------------------------------------------


def test_image_folder_reader_when_given_preprocessing_feeds_what_the_pipeline_would(
    tmp_path: Path, classifier: ModelFile
) -> None:
    # Given 5 images of 32x24 and the classifier's preprocessing (resize to 8x8, NCHW, float /255)
    folder = write_images(tmp_path / "images", 5)

    # When they are read
    samples = list(open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS))

    # Then each is a float32 [1, 3, 8, 8] tensor scaled like the pipeline scales frames
    assert len(samples) == 5
    assert samples[2]["images"].shape == (1, 3, 8, 8) and samples[2]["images"].dtype == np.float32
    np.testing.assert_allclose(samples[2]["images"], 20 / 255, rtol=1e-6, err_msg="image 2 is all 20s, scaled")


def test_image_folder_reader_when_model_takes_raw_frames_feeds_bgr_frames(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    model = ModelFile.load(tiny_models["uint8_mean_classifier"])
    folder = write_images(tmp_path / "images", 2, size=(16, 12))
    samples = list(open_calibration_data(folder, model))
    assert samples[1]["frames"].shape == (1, 12, 16, 3) and samples[1]["frames"].dtype == np.uint8
    assert int(samples[1]["frames"].max()) == 10, "the frame goes in unchanged"


def test_image_folder_reader_when_folder_has_no_images_says_which_files_it_wanted(
    tmp_path: Path, classifier: ModelFile
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "readme.txt").write_text("no pictures here")
    with pytest.raises(ConfigError, match=r"calibration folder .*empty has no images: expected \.jpg, \.jpeg, \.png"):
        open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS)


def test_image_folder_reader_when_an_image_is_corrupt_names_it(tmp_path: Path, classifier: ModelFile) -> None:
    folder = write_images(tmp_path / "images", 2)
    (folder / "img_00.png").write_bytes(b"\x89PNG but then nothing")
    with pytest.raises(ConfigError, match=r"cannot read calibration image .*img_00\.png"):
        open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS)


def test_image_folder_reader_when_model_needs_preprocessing_and_none_is_given_asks_for_it(
    tmp_path: Path, classifier: ModelFile
) -> None:
    folder = write_images(tmp_path / "images", 2)
    with pytest.raises(ConfigError, match=r"does not take raw frames .*--pipeline"):
        open_calibration_data(folder, classifier)


def test_image_folder_reader_when_preprocessing_does_not_fit_the_model_says_so(
    tmp_path: Path, classifier: ModelFile
) -> None:
    folder = write_images(tmp_path / "images", 2)
    wrong = CLASSIFIER_PREPROCESS.model_copy(update={"resize": (16, 16)})
    with pytest.raises(ConfigError, match=r"takes 8x8 images, preprocess.resize gives 16x16"):
        open_calibration_data(folder, classifier, wrong)


def test_image_folder_sha256_when_a_file_or_the_preprocessing_changes_changes(
    tmp_path: Path, classifier: ModelFile
) -> None:
    folder = write_images(tmp_path / "images", 3)
    before = open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS).sha256()
    assert open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS).sha256() == before, "stable"

    rgb_mean = CLASSIFIER_PREPROCESS.model_copy(update={"mean": (0.5, 0.5, 0.5)})
    assert open_calibration_data(folder, classifier, rgb_mean).sha256() != before, "the preprocessing is hashed"

    import_cv2().imwrite(str(folder / "img_01.png"), np.full((24, 32, 3), 99, np.uint8))
    assert open_calibration_data(folder, classifier, CLASSIFIER_PREPROCESS).sha256() != before, "contents are hashed"


def test_sample_set_when_preprocessing_was_folded_into_the_graph_feeds_raw_frames(
    tmp_path: Path, classifier: ModelFile
) -> None:
    # Given a reader opened for the classifier's float input, with its preprocessing
    reader = open_calibration_data(write_images(tmp_path / "images", 3), classifier, CLASSIFIER_PREPROCESS)

    # When the samples are read for an engine whose graph took over that preprocessing (a raw frame input)
    folded = [TensorMeta("frame", np.dtype(np.uint8), ("N", "frame_height", "frame_width", 3))]
    samples = SampleSet.from_reader(reader, folded)

    # Then the raw BGR frames go in
    assert samples.samples[0]["frame"].shape == (1, 24, 32, 3) and samples.samples[0]["frame"].dtype == np.uint8


# --- Video ------------------------------------------------------------------------------------------------------


def test_video_reader_when_given_a_step_reads_every_kth_frame(small_video: Path, classifier: ModelFile) -> None:
    # Given the 24-frame test video
    # When every 5th frame is read
    reader = open_calibration_data(small_video, classifier, CLASSIFIER_PREPROCESS, frame_step=5)
    samples = list(reader)

    # Then frames 0, 5, 10, 15, 20 come, preprocessed
    assert len(reader) == len(samples) == 5
    assert samples[0]["images"].shape == (1, 3, 8, 8)


def test_video_reader_when_limited_spreads_the_frames_over_the_video(small_video: Path, classifier: ModelFile) -> None:
    reader = open_calibration_data(small_video, classifier, CLASSIFIER_PREPROCESS, limit=4)
    assert len(list(reader)) == 4
    assert reader.sha256() != open_calibration_data(small_video, classifier, CLASSIFIER_PREPROCESS).sha256(), (
        "which frames are read is part of the hash"
    )


def test_video_reader_when_file_is_not_a_video_says_it_cannot_open_it(tmp_path: Path, classifier: ModelFile) -> None:
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match=r"calibration video .*clip\.mp4"):
        open_calibration_data(video, classifier, CLASSIFIER_PREPROCESS)


# --- Samples and the calibration fingerprint ---------------------------------------------------------------------


def test_sample_set_split_when_every_fourth_is_held_out_keeps_labels_with_their_samples(
    tmp_path: Path, classifier: ModelFile
) -> None:
    data = write_npz(tmp_path / "data.npz", images=images(10), labels=np.arange(10))
    calibration, held_out = SampleSet.from_reader(open_calibration_data(data, classifier)).split(4)
    assert held_out.labels is not None and held_out.labels.tolist() == [3, 7]
    assert calibration.labels is not None and calibration.labels.tolist() == [0, 1, 2, 4, 5, 6, 8, 9]
    np.testing.assert_array_equal(held_out.samples[0]["images"][0], images(10)[3])


def test_sample_set_split_when_there_is_one_sample_asks_for_more(tmp_path: Path, classifier: ModelFile) -> None:
    data = write_npz(tmp_path / "data.npz", images=images(1))
    with pytest.raises(ConfigError, match="expected at least 2 samples"):
        SampleSet.from_reader(open_calibration_data(data, classifier)).split(4)


def test_calibration_fingerprint_when_data_settings_or_task_change_changes(
    tmp_path: Path, classifier: ModelFile
) -> None:
    reader = open_calibration_data(write_npz(tmp_path / "a.npz", images=images(4)), classifier)
    other = open_calibration_data(write_npz(tmp_path / "b.npz", images=images(5)), classifier)
    base = Calibration(reader, Int8Settings(), TaskSpec())
    assert base.fingerprint() == Calibration(reader, Int8Settings(), TaskSpec()).fingerprint(), "stable"
    variants = [
        Calibration(other, Int8Settings(), TaskSpec()),
        Calibration(reader, Int8Settings(method="entropy"), TaskSpec()),
        Calibration(reader, Int8Settings(max_accuracy_drop=0.5), TaskSpec()),
        Calibration(reader, Int8Settings(), TaskSpec(kind="classification")),
    ]
    assert len({v.fingerprint() for v in variants} | {base.fingerprint()}) == 5, "each change makes a new key"
