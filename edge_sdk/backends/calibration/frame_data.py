"""Calibration samples from frames: a folder of images or a video, preprocessed like the pipeline does."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import Preprocessor
from edge_sdk.core.tensor_meta import TensorMeta, select_input

from .reader import Sample, check_sample, spread

if TYPE_CHECKING:
    from edge_sdk.core.preprocess import PreprocessSpec

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")

FrameToSample = Callable[[np.ndarray], Sample]


def frame_feed(
    inputs: Sequence[TensorMeta], preprocess: PreprocessSpec | None, input_name: str | None, description: str
) -> tuple[FrameToSample, str]:
    """How one BGR uint8 frame becomes a sample, and the input it feeds: through the pipeline's
    Preprocessor, or as the raw frame when there is no preprocessing and the input takes raw frames."""

    if len(inputs) != 1:
        names = [meta.name for meta in inputs]
        raise ConfigError(f"calibration data {description}: frames feed one input, the model has inputs {names}")
    meta = select_input(inputs, input_name, "calibration input")
    if preprocess is not None:
        try:
            preprocessor = Preprocessor(preprocess, meta)
        except ModelError as exc:
            raise ConfigError(f"calibration data {description}: {exc}") from None
        return (lambda frame: {meta.name: preprocessor(frame)}), meta.name
    if not _takes_raw_frames(meta):
        raise ConfigError(
            f"calibration data {description}: model input {meta.describe()} does not take raw frames (uint8 NHWC "
            "with 3 channels); give the model's preprocessing (edge-sdk build --pipeline YAML)"
        )
    return _raw_feed(meta), meta.name


def _takes_raw_frames(meta: TensorMeta) -> bool:
    channels = meta.shape[3] if len(meta.shape) == 4 else 0
    return meta.dtype == np.uint8 and (channels == 3 or not isinstance(channels, int))


def _raw_feed(meta: TensorMeta) -> FrameToSample:
    height, width = meta.shape[1], meta.shape[2]
    size = (width, height) if isinstance(width, int) and isinstance(height, int) else None

    def feed(frame: np.ndarray) -> Sample:
        if size and (frame.shape[1], frame.shape[0]) != size:
            import cv2

            frame = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR)
        return {meta.name: np.ascontiguousarray(frame[np.newaxis])}

    return feed


class _FrameReader:
    """What image and video readers share: the feed choice, settings for the hash, rebinding."""

    def __init__(
        self,
        path: Path,
        inputs: Sequence[TensorMeta],
        preprocess: PreprocessSpec | None,
        input_name: str | None,
        limit: int | None,
    ):
        self.path = path
        self.description = str(path)
        self.labels: np.ndarray | None = None
        self.preprocess = preprocess
        self.input_name = input_name
        self.limit = limit
        self._feed, self._target = frame_feed(inputs, preprocess, input_name, self.description)

    def bind(self, inputs: Sequence[TensorMeta]) -> _FrameReader:
        """The same frames, fed to a model with these inputs.

        When the input the preprocessing targeted is gone, the build folded that preprocessing into the
        graph, whose new input takes the raw BGR frames.
        """
        bound = object.__new__(type(self))
        bound.__dict__.update(self.__dict__)
        if self._target in {meta.name for meta in inputs}:
            bound._feed, bound._target = frame_feed(inputs, self.preprocess, self._target, self.description)
        else:
            bound._feed, bound._target = frame_feed(inputs, None, None, self.description)
        return bound

    def _settings(self) -> dict[str, Any]:
        return {
            "preprocess": self.preprocess.model_dump(mode="json") if self.preprocess else None,
            "input": self.input_name,
            "limit": self.limit,
        }


class ImageFolderReader(_FrameReader):
    """Every .jpg/.jpeg/.png/.bmp below a folder, in name order, spread evenly up to `limit`."""

    def __init__(
        self,
        folder: Path,
        inputs: Sequence[TensorMeta],
        preprocess: PreprocessSpec | None = None,
        input_name: str | None = None,
        limit: int | None = None,
    ):
        images = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise ConfigError(
                f"calibration folder {folder} has no images: expected {', '.join(IMAGE_SUFFIXES)} files, got none"
            )
        self.files = [images[i] for i in spread(len(images), limit)]
        super().__init__(folder, inputs, preprocess, input_name, limit)
        check_sample(self._feed(_read_image(self.files[0])), inputs, self.description)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for path in self.files:
            digest.update(str(path.relative_to(self.path)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        digest.update(json.dumps({"reader": "images", **self._settings()}, sort_keys=True).encode())
        return digest.hexdigest()

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[Sample]:
        for path in self.files:
            yield self._feed(_read_image(path))


class VideoReader(_FrameReader):
    """Every `frame_step`-th frame of a video (default: a step that spreads `limit` frames over it)."""

    def __init__(
        self,
        path: Path,
        inputs: Sequence[TensorMeta],
        preprocess: PreprocessSpec | None = None,
        input_name: str | None = None,
        limit: int | None = None,
        frame_step: int | None = None,
    ):
        if frame_step is not None and frame_step < 1:
            raise ConfigError(f"calibration frame step: expected at least 1, got {frame_step}")
        super().__init__(path, inputs, preprocess, input_name, limit)
        capture = _open_video(path)
        try:
            total = int(capture.get(_cv2().CAP_PROP_FRAME_COUNT) or 0)
            ok, first = capture.read()
        finally:
            capture.release()
        if not ok or first is None:
            raise ConfigError(f"calibration video {path} has no readable frames")
        self.frame_step = frame_step or (max(1, total // limit) if limit and total > 0 else 1)
        planned = math.ceil(total / self.frame_step) if total > 0 else 1
        self._count = min(planned, limit) if limit else planned
        check_sample(self._feed(first), inputs, self.description)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        settings = {"reader": "video", "frame_step": self.frame_step, **self._settings()}
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()

    def __len__(self) -> int:
        """Frames planned from the container's frame count (a shorter video yields fewer)."""
        return self._count

    def __iter__(self) -> Iterator[Sample]:
        capture = _open_video(self.path)
        try:
            index = yielded = 0
            while self.limit is None or yielded < self.limit:
                if index % self.frame_step:
                    if not capture.grab():
                        break
                else:
                    ok, frame = capture.read()
                    if not ok or frame is None:
                        break
                    yielded += 1
                    yield self._feed(frame)
                index += 1
        finally:
            capture.release()


def _cv2() -> Any:

    return import_cv2()


def _read_image(path: Path) -> np.ndarray:
    image = _cv2().imread(str(path), 1)  # 1 = IMREAD_COLOR: always BGR with 3 channels
    if image is None:
        raise ConfigError(f"cannot read calibration image {path}: not a decodable image")
    return np.asarray(image)


def _open_video(path: Path) -> Any:
    capture = _cv2().VideoCapture(str(path))
    if not capture.isOpened():
        capture.release()
        raise ConfigError(f"cannot open calibration video {path}")
    return capture
