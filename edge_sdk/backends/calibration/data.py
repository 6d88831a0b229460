"""Which calibration reader a path needs: a folder of images, a video file, or an .npz archive."""

from __future__ import annotations

from pathlib import Path

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.preprocess import PreprocessSpec

from .frame_data import ImageFolderReader, VideoReader
from .npz_data import NpzReader
from .reader import CalibrationReader

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg")


def open_calibration_data(
    path: Path,
    model: ModelFile,
    preprocess: PreprocessSpec | None = None,
    input_name: str | None = None,
    limit: int | None = None,
    *,
    frame_step: int | None = None,
) -> CalibrationReader:
    """A reader for a folder of images, a video file, or an .npz archive, checked against `model`'s inputs.

    Images and video frames go through `preprocess` (the pipeline's Preprocessor), or in as raw BGR
    frames when the model takes them (uint8 NHWC). An .npz holds one array per input name (or a single
    array), samples along the first axis, and optionally `labels`. `limit` caps the samples, spread
    evenly over the data; `frame_step` reads every k-th video frame (default: spread over the video).
    Problems with the data raise ConfigError before any build work.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"calibration sample limit: expected at least 1, got {limit}")
    if not path.exists():
        raise ConfigError(f"calibration data not found: {path} (expected a folder of images, a video or an .npz)")
    if path.is_dir():
        return ImageFolderReader(path, model.inputs, preprocess, input_name, limit)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return NpzReader(path, model.inputs, limit)
    if suffix in VIDEO_SUFFIXES:
        return VideoReader(path, model.inputs, preprocess, input_name, limit, frame_step)
    raise ConfigError(
        f"calibration data {path}: expected a folder of images, a video ({', '.join(VIDEO_SUFFIXES)}) "
        f"or an .npz, got a '{suffix or 'suffix-less'}' file"
    )
