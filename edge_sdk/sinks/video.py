"""An annotated video file: H.264 in MP4 (browsers and editors play it) when PyAV is installed, else
OpenCV's MPEG-4 Part 2 (mp4v).

OpenCV's wheels cannot encode H.264; PyAV's (`pip install 'edge-sdk[video]'`; opt-in, as libx264 is GPL-2.0+) bundle
FFmpeg with libx264. `codec: auto` (the default) writes H.264 through PyAV into .mp4/.mov/.mkv/.m4v
files (yuv420p, the pixel format browsers decode; the index at the front, `+faststart`, so a file
plays while it downloads) and falls back to OpenCV's mp4v with one line saying so; `codec: h264`
insists on H.264; a FourCC (mp4v, MJPG, XVID) picks OpenCV's writer as before. The pipeline's log says
which encoder a file gets, before the pipeline starts (`check`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import Field
from typing_extensions import Self

from edge_sdk.annotate import draw_result
from edge_sdk.core.errors import SinkError, first_line
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase

log = logging.getLogger(__name__)

H264_CONTAINERS = (".mp4", ".mov", ".mkv", ".m4v")
"""Files `codec: auto` writes as H.264; other suffixes (.avi) keep OpenCV's mp4v."""
H264_ENCODERS = ("libx264", "libopenh264", "h264")
"""FFmpeg encoders of H.264 tried in this order (PyAV's wheels bundle libx264)."""
X264_OPTIONS = {"preset": "veryfast", "crf": "23", "threads": str(min(4, os.cpu_count() or 1))}
"""A preset that keeps up on an edge box's CPU, at x264's default quality; at most 4 encoder threads
(x264 takes 1.5 per core), which leaves the cores to inference and bounds the frames held in flight
(1080p: +240 MB peak with 3 threads here)."""
H264_NAMES = ("h264", "avc1")


class VideoSinkSpec(SinkSpecBase):
    type: Literal["video"] = Field(description="Write frames with boxes and labels drawn to a video file.")
    path: Path = Field(description="Output file (.mp4 or .avi); relative to the pipeline file.")
    fps: float = Field(
        30.0, gt=0, le=1000, strict=True, description="Frame rate written into the file; 0 < fps <= 1000."
    )
    codec: str = Field(
        "auto",
        min_length=4,
        max_length=4,
        description="auto: H.264 through PyAV for .mp4/.mov/.mkv when PyAV is installed, else OpenCV's mp4v; "
        "h264: H.264 or an error; any other FourCC (mp4v, MJPG, XVID) is written by OpenCV.",
    )

    def build(self, pipeline_name: str) -> VideoSink:
        return VideoSink(self.path, fps=self.fps, codec=self.codec)

    def after_restart(self, restart: int) -> Self:
        """An mp4 cannot be appended to: a restarted output stage writes name.partN.mp4."""
        path = self.path
        return self.model_copy(update={"path": path.with_name(f"{path.stem}.part{restart}{path.suffix}")})

    def check(self) -> None:
        """SinkError when `codec: h264` cannot be met here; else the encoder this file gets, logged.
        Without importing PyAV (50 ms here, before the first frame): its wheels bundle libx264, and
        the sink checks the encoder itself when it opens."""
        encoder = choose_encoder(self.path, self.codec, probe=False)
        log.info("video sink %s: %s", self.path, encoder.describe())
        if encoder.fallback_reason:
            log.info("video sink %s: %s", self.path, encoder.fallback_reason)


@dataclass(frozen=True)
class Encoder:
    library: Literal["pyav", "opencv"]
    codec: str
    """An FFmpeg encoder's name (pyav) or a FourCC (opencv)."""
    fallback_reason: str = ""
    """Why `codec: auto` did not get H.264 (empty when it did, or when a FourCC was asked for)."""

    def describe(self) -> str:
        if self.library == "pyav":
            return f"H.264 ({self.codec} through PyAV)"
        return f"{self.codec} through OpenCV"


def choose_encoder(path: Path, codec: str, probe: bool = True) -> Encoder:
    """The encoder a video sink with these settings writes with; SinkError when `codec` is h264 and
    no H.264 encoder is installed. `probe=False` only looks whether PyAV is installed and takes its
    bundled libx264 on trust."""
    wanted = codec.lower()
    if wanted not in ("auto", *H264_NAMES):
        return Encoder("opencv", codec)
    if wanted == "auto" and path.suffix.lower() not in H264_CONTAINERS:
        return Encoder("opencv", "mp4v")
    installed = importlib.util.find_spec("av") is not None
    if probe:
        av = _import_av()
        encoder = _h264_encoder(av) if av is not None else None
    else:
        encoder = H264_ENCODERS[0] if installed else None
    if encoder is not None:
        return Encoder("pyav", encoder)
    missing = "PyAV is not installed" if not installed else "this PyAV has no H.264 encoder"
    if wanted != "auto":
        raise SinkError(
            f"video sink {path}: codec {codec} needs PyAV with an H.264 encoder and {missing}; "
            "pip install 'edge-sdk[video]', or set codec: mp4v"
        )
    return Encoder(
        "opencv",
        "mp4v",
        fallback_reason=f"{missing}, so it is MPEG-4 Part 2 (mp4v), which browsers do not play; "
        "pip install 'edge-sdk[video]' for H.264",
    )


class VideoSink(Sink):
    """Opens the writer on the first frame, when the frame size is known; later frames of another size
    are resized to it."""

    def __init__(self, path: Path, fps: float = 30.0, codec: str = "auto"):
        self.path = path
        self.fps = fps
        self.codec = codec
        self.name = f"video:{path}"
        self._writer: _Writer | None = None
        self._encoder: Encoder | None = None
        self._size: tuple[int, int] | None = None

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"cannot create folder for {self.path}: {exc.strerror}") from None
        self._encoder = choose_encoder(self.path, self.codec)
        if self._encoder.fallback_reason and importlib.util.find_spec("av") is not None:
            # check() announced H.264 on the strength of PyAV being installed
            log.warning("video sink %s: %s", self.path, self._encoder.fallback_reason)

    def write(self, result: Result, image: np.ndarray) -> None:
        size = (image.shape[1], image.shape[0])
        if self._writer is None:
            encoder = self._encoder or choose_encoder(self.path, self.codec)
            if encoder.library == "pyav":
                self._writer = _PyAvWriter(self.path, encoder.codec, self.fps, size)
            else:
                self._writer = _OpenCvWriter(self.path, encoder.codec, self.fps, size)
            self._size = size
            log.debug("video sink %s: %s, %dx%d at %g fps", self.path, encoder.describe(), *size, self.fps)
        if size != self._size:
            image = import_cv2().resize(image, self._size)
        self._writer.write(draw_result(image, result))

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()


class _Writer(Protocol):
    def write(self, bgr: np.ndarray) -> None: ...
    def close(self) -> None: ...


class _OpenCvWriter:
    def __init__(self, path: Path, fourcc: str, fps: float, size: tuple[int, int]):
        cv2 = import_cv2()
        self._writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
        if not self._writer.isOpened():
            raise SinkError(f"OpenCV cannot write {fourcc} video to {path}")

    def write(self, bgr: np.ndarray) -> None:
        self._writer.write(bgr)

    def close(self) -> None:
        self._writer.release()


class _PyAvWriter:
    """H.264 in yuv420p, whose chroma is subsampled 2x2: an odd width or height loses its last column or row."""

    def __init__(self, path: Path, encoder: str, fps: float, size: tuple[int, int]):
        av = _import_av()
        assert av is not None, "choose_encoder picked PyAV"
        self._av = av
        self._width, self._height = size[0] - size[0] % 2, size[1] - size[1] % 2
        if (self._width, self._height) != size:
            log.info("video sink %s: H.264 needs an even size, writing %dx%d", path, self._width, self._height)
        rate = Fraction(fps).limit_denominator(1001)
        faststart = {"movflags": "+faststart"} if path.suffix.lower() in (".mp4", ".mov", ".m4v") else {}
        try:
            self._container: Any = av.open(str(path), mode="w", container_options=faststart)
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            raise SinkError(f"PyAV cannot write H.264 video to {path}: {first_line(exc)}") from None
        try:
            self._stream: Any = self._container.add_stream(encoder, rate=rate)
            self._stream.width, self._stream.height = self._width, self._height
            self._stream.pix_fmt = "yuv420p"
            if encoder == "libx264":
                self._stream.options = dict(X264_OPTIONS)
            self._stream.codec_context.time_base = 1 / rate
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            self._container.close()  # the file it opened
            raise SinkError(f"PyAV cannot write H.264 video to {path}: {first_line(exc)}") from None
        self._time_base = 1 / rate
        self._index = 0
        self.path = path

    def write(self, bgr: np.ndarray) -> None:
        frame = self._av.VideoFrame.from_ndarray(
            np.ascontiguousarray(bgr[: self._height, : self._width]), format="bgr24"
        )
        frame.pts, frame.time_base = self._index, self._time_base
        self._index += 1
        self._mux(frame)

    def close(self) -> None:
        try:
            self._mux(None)  # what the encoder still holds (its look-ahead)
        finally:
            self._container.close()

    def _mux(self, frame: Any) -> None:
        try:
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        except (self._av.error.FFmpegError, OSError) as exc:
            raise SinkError(f"PyAV failed writing {self.path}: {first_line(exc)}") from None


def _import_av() -> ModuleType | None:
    try:
        import av
    except ImportError:
        return None
    return av


def _h264_encoder(av: ModuleType) -> str | None:
    for name in H264_ENCODERS:
        try:
            av.Codec(name, "w")
        except Exception:  # PyAV raises UnknownCodecError, or ValueError in older releases
            continue
        return name
    return None
