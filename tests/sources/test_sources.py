"""Frame sources: URIs to sources, video files, image folders and the synthetic pan-and-zoom camera."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.sources.image_folder import ImageFolderSource
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.skipped_frames import FrameErrorPolicy
from edge_sdk.sources.spec import SourceSpec
from edge_sdk.sources.synthetic import PanZoomSource
from edge_sdk.sources.video_file import VideoFileSource

from ..conftest import ASTRONAUT

VIDEO_FRAMES = 24
VIDEO_SIZE = (320, 240)


def solid_image(bgr: tuple[int, int, int], width: int = 32, height: int = 24) -> np.ndarray:
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:] = bgr
    return image


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """Three PNGs written out of name order: b (green), a (blue), c (red)."""
    cv2 = import_cv2()
    folder = tmp_path / "frames"
    folder.mkdir()
    for name, bgr in [("b.png", (0, 255, 0)), ("a.png", (255, 0, 0)), ("c.png", (0, 0, 255))]:
        assert cv2.imwrite(str(folder / name), solid_image(bgr)), "test setup: OpenCV must write the PNG"
    return folder


# --- create_source: URIs ---------------------------------------------------------------------------


def test_create_source_when_uri_is_a_plain_relative_path_resolves_it_against_base_dir(
    tmp_path: Path, small_video: Path
) -> None:
    # given a video next to the pipeline file, named by a relative path
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "cam.mp4").write_bytes(small_video.read_bytes())

    # when
    source = create_source(SourceSpec(uri="clips/cam.mp4"), tmp_path)

    # then
    assert isinstance(source, VideoFileSource), "a plain path names a video file"
    assert source.path == tmp_path / "clips" / "cam.mp4", "a relative path starts from the pipeline's folder"
    assert source.name == "cam", "without a name, a video source is named after its file"
    with source:
        frame = source.read()
    assert frame is not None, "the resolved video must be readable"


def test_create_source_when_uri_is_file_scheme_with_absolute_path_uses_that_path(
    tmp_path: Path, small_video: Path
) -> None:
    # given
    spec = SourceSpec(uri=f"file://{small_video}", name="front-door")

    # when
    source = create_source(spec, tmp_path / "elsewhere")

    # then
    assert isinstance(source, VideoFileSource), "file:// names a video file"
    assert source.path == small_video, "an absolute file:// path is not rebased on base_dir"
    assert source.name == "front-door", "an explicit name wins over the file name"
    with source:
        frame = source.read()
    assert frame is not None and frame.meta.source == "front-door", "frames carry the source's name"


def test_create_source_when_uri_is_images_scheme_reads_the_folder_below_base_dir(
    tmp_path: Path, image_folder: Path
) -> None:
    # given image_folder is tmp_path/frames

    # when
    source = create_source(SourceSpec(uri="images://frames"), tmp_path)

    # then
    assert isinstance(source, ImageFolderSource), "images:// names an image folder"
    assert source.folder == tmp_path / "frames", "the folder is relative to base_dir"
    with source:
        frames = list(source)
    assert len(frames) == 3, "every image in the folder becomes one frame"
    assert frames[0].meta.source == "frames", "without a name, a folder source is named after the folder"


def test_create_source_when_uri_is_synthetic_with_params_gives_that_many_frames_of_that_size(
    tmp_path: Path, astronaut_bgr: np.ndarray
) -> None:
    # given a still image next to the pipeline file
    assert import_cv2().imwrite(str(tmp_path / "still.png"), astronaut_bgr), "test setup: write the still"
    spec = SourceSpec(uri="synthetic://?image=still.png&frames=5&size=64x48")

    # when
    source = create_source(spec, tmp_path)

    # then
    assert isinstance(source, PanZoomSource), "synthetic:// is the pan-and-zoom camera"
    assert source.image_path == tmp_path / "still.png", "the image parameter is relative to base_dir"
    assert source.name == "synthetic", "an unnamed synthetic source is called 'synthetic'"
    with source:
        frames = list(source)
    assert len(frames) == 5, "frames=5 gives exactly five frames"
    assert [f.meta.index for f in frames] == [0, 1, 2, 3, 4], "frame indexes count up from 0"
    for frame in frames:
        assert frame.image.shape == (48, 64, 3), "size=64x48 means 64 wide and 48 high, 3 channels"
        assert frame.image.dtype == np.uint8, "frames are uint8 BGR"
        assert (frame.meta.width, frame.meta.height) == (64, 48), "the metadata states the frame size"


# --- VideoFileSource ---------------------------------------------------------------------------------


def test_video_file_source_when_read_to_the_end_gives_every_frame_once_then_none(small_video: Path) -> None:
    # given
    source = VideoFileSource(small_video)

    # when
    with source:
        frames = list(source)
        after_end = source.read()

    # then
    assert len(frames) == VIDEO_FRAMES, "a 24-frame video gives exactly 24 frames"
    assert [f.meta.index for f in frames] == list(range(VIDEO_FRAMES)), "indexes count up from 0 without gaps"
    for frame in frames:
        assert (frame.meta.width, frame.meta.height) == VIDEO_SIZE, "metadata states the video's frame size"
        assert frame.image.shape == (VIDEO_SIZE[1], VIDEO_SIZE[0], 3), "frames are HxWx3 at the video's size"
        assert frame.image.dtype == np.uint8, "frames are uint8 BGR"
    assert after_end is None, "the source keeps reporting its end"
    assert source.fps == pytest.approx(30.0), "the file's frame rate is exposed"


def test_video_file_source_when_loop_is_set_keeps_going_past_the_end(small_video: Path) -> None:
    # given
    source = VideoFileSource(small_video, loop=True)

    # when
    with source:
        frames = [source.read() for _ in range(VIDEO_FRAMES + 10)]

    # then
    assert all(f is not None for f in frames), "a looping video never ends"
    assert [f.meta.index for f in frames if f is not None] == list(range(VIDEO_FRAMES + 10)), (
        "indexes keep counting up across the loop"
    )


def test_video_file_source_when_file_is_missing_raises_source_error_naming_the_path(tmp_path: Path) -> None:
    # given
    missing = tmp_path / "no-such-clip.mp4"

    # when
    with pytest.raises(SourceError) as caught, VideoFileSource(missing):
        pass

    # then
    assert str(missing) in str(caught.value), "the error names the file the user asked for"


def test_video_file_source_when_file_is_corrupt_raises_source_error(tmp_path: Path) -> None:
    # given random bytes dressed up as an mp4
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(np.random.default_rng(3).integers(0, 256, 8192, dtype=np.uint8).tobytes())

    # when / then
    with pytest.raises(SourceError) as caught, VideoFileSource(corrupt) as source:
        source.read()
    assert str(corrupt) in str(caught.value), "the error names the file that cannot be decoded"


# --- ImageFolderSource -------------------------------------------------------------------------------


def test_image_folder_source_when_opened_reads_images_in_name_order(image_folder: Path) -> None:
    # given a.png blue, b.png green, c.png red (written in the order b, a, c)

    # when
    with ImageFolderSource(image_folder, name="shelf") as source:
        frames = list(source)

    # then
    colours = [tuple(int(v) for v in f.image[0, 0]) for f in frames]
    assert colours == [(255, 0, 0), (0, 255, 0), (0, 0, 255)], "images come in file-name order, a then b then c"
    assert [f.meta.index for f in frames] == [0, 1, 2], "indexes count up from 0"
    assert all(f.meta.source == "shelf" for f in frames), "frames carry the source's name"
    assert all((f.meta.width, f.meta.height) == (32, 24) for f in frames), "metadata states each image's size"


def test_image_folder_source_when_loop_is_set_starts_again_after_the_last_image(image_folder: Path) -> None:
    # given
    source = ImageFolderSource(image_folder, loop=True)

    # when
    with source:
        frames = [source.read() for _ in range(5)]

    # then
    assert all(f is not None for f in frames), "a looping folder never ends"
    first_pixels = [tuple(int(v) for v in f.image[0, 0]) for f in frames if f is not None]
    assert first_pixels[3] == first_pixels[0], "the fourth frame is the first image again"
    assert [f.meta.index for f in frames if f is not None] == [0, 1, 2, 3, 4], "indexes keep counting up"


def test_image_folder_source_when_folder_has_no_images_raises_source_error(tmp_path: Path) -> None:
    # given a folder with only a non-image file
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a picture")

    # when / then
    with pytest.raises(SourceError) as caught, ImageFolderSource(folder):
        pass
    assert str(folder) in str(caught.value), "the error names the folder"


def test_image_folder_source_when_folder_is_missing_raises_source_error(tmp_path: Path) -> None:
    # given
    folder = tmp_path / "missing"

    # when / then
    with pytest.raises(SourceError) as caught, ImageFolderSource(folder):
        pass
    assert str(folder) in str(caught.value), "the error names the folder"


def test_image_folder_source_when_an_image_cannot_be_decoded_and_on_error_is_stop_raises_source_error(
    image_folder: Path,
) -> None:
    # given a broken file sorted first, and a source told to stop on a frame it cannot decode
    broken = image_folder / "0-broken.png"
    broken.write_bytes(os.urandom(256))

    # when / then
    with (
        pytest.raises(SourceError) as caught,
        ImageFolderSource(image_folder, on_error=FrameErrorPolicy.STOP) as source,
    ):
        source.read()
    assert str(broken) in str(caught.value), "the error names the image that cannot be decoded"


# --- PanZoomSource -----------------------------------------------------------------------------------


@pytest.mark.parametrize("image", [ASTRONAUT, None], ids=["astronaut", "gradient"])
def test_pan_zoom_source_when_read_gives_different_frames_of_the_requested_size(image: Path | None) -> None:
    # given
    source = PanZoomSource(image, frames=8, size=(96, 64))

    # when
    with source:
        frames = list(source)

    # then
    assert len(frames) == 8, "frames=8 gives eight frames"
    for frame in frames:
        assert frame.image.shape == (64, 96, 3), "every frame is 96 wide and 64 high, 3 channels"
        assert frame.image.dtype == np.uint8, "frames are uint8 BGR"
    for before, after in itertools.pairwise(frames):
        assert not np.array_equal(before.image, after.image), (
            f"the camera moves: frame {after.meta.index} differs from frame {before.meta.index}"
        )


def test_pan_zoom_source_when_image_cannot_be_read_raises_source_error(tmp_path: Path) -> None:
    # given
    missing = tmp_path / "nope.png"

    # when / then
    with pytest.raises(SourceError) as caught, PanZoomSource(missing, frames=2):
        pass
    assert str(missing) in str(caught.value), "the error names the image"


def test_create_source_when_max_frames_is_set_ends_the_source_after_that_many_frames(small_video: Path) -> None:
    # given a 24-frame video limited to 5 frames
    source = create_source(SourceSpec(uri=str(small_video), max_frames=5), small_video.parent)
    # when
    with source:
        indexes = [frame.meta.index for frame in source]
    # then
    assert indexes == [0, 1, 2, 3, 4], "max_frames is honoured by the source itself, whichever runtime reads it"
