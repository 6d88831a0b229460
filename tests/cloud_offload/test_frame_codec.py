"""The frame a cloud request carries (cloud_offload/frame_codec.py): downscaled with its aspect ratio,
encoded and decoded back close to the original, and bounded against what a hostile client sends."""

from __future__ import annotations

import numpy as np
import pytest

from cloud_offload.frame_codec import MAX_PIXELS, decode_frame, downscale, encode_frame, image_size
from cloud_offload.tensor_codec import PayloadError
from edge_sdk.core.opencv import import_cv2


@pytest.fixture(scope="module")
def frame(astronaut_bgr: np.ndarray) -> np.ndarray:
    return import_cv2().resize(astronaut_bgr, (640, 480), interpolation=import_cv2().INTER_AREA)


@pytest.mark.parametrize("image_format", ["jpeg", "webp"])
def test_a_frame_is_downscaled_to_the_longer_side_and_decodes_close_to_the_original(
    frame: np.ndarray, image_format: str
) -> None:
    # when a 640x480 frame is sent for a model whose input's longer side is 300
    data = encode_frame(frame, max_side=300, quality=90, image_format=image_format)  # type: ignore[arg-type]
    decoded = decode_frame(data)
    # then the aspect ratio is kept and the pixels are those of the downscaled frame, within JPEG's loss
    assert decoded.shape == (225, 300, 3) and decoded.dtype == np.uint8
    assert image_size(data) == (image_format, 300, 225)
    expected = downscale(frame, 300)
    assert float(np.abs(decoded.astype(np.int16) - expected.astype(np.int16)).mean()) < 4.0


def test_a_frame_that_fits_is_not_resized_and_quality_buys_bytes(frame: np.ndarray) -> None:
    assert downscale(frame, 640) is frame
    assert downscale(frame, None) is frame
    sizes = [len(encode_frame(frame, quality=q)) for q in (50, 75, 95)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1] / 2


def test_a_portrait_frame_keeps_its_orientation(frame: np.ndarray) -> None:
    portrait = np.ascontiguousarray(frame.transpose(1, 0, 2))  # 480 wide, 640 high
    assert decode_frame(encode_frame(portrait, max_side=320)).shape == (320, 240, 3)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an image at all",
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",  # a JPEG cut off before its frame header
        b"\xff\xd8" + bytes(64),  # a JPEG start, then zeros
        b"RIFF\x00\x00\x00\x00WEBPVP8 \x00\x00\x00\x00",
        b"\x89PNG\r\n\x1a\n" + bytes(32),  # a PNG: not what an edge sends
    ],
)
def test_garbage_is_one_payload_error(data: bytes) -> None:
    with pytest.raises(PayloadError):
        decode_frame(data)


def test_a_truncated_jpeg_with_a_valid_header_is_a_payload_error(frame: np.ndarray) -> None:
    data = encode_frame(frame, quality=80)
    with pytest.raises(PayloadError):
        decode_frame(data[: len(data) // 8])


def test_an_image_over_the_pixel_bound_is_refused_from_its_header(frame: np.ndarray) -> None:
    # given a JPEG whose header claims 60000x60000 pixels (a decompression bomb) and a real large one
    data = bytearray(encode_frame(frame, quality=50))
    sof = next(i for i in range(2, len(data) - 1) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC2))
    data[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    # then it is refused before decoding, naming the size
    with pytest.raises(PayloadError, match="60000x60000"):
        decode_frame(bytes(data))
    with pytest.raises(PayloadError, match="640x480"):
        decode_frame(encode_frame(frame), max_pixels=640 * 480 - 1)
    assert MAX_PIXELS == 4096 * 4096


def test_encoding_refuses_what_is_not_a_bgr_frame() -> None:
    with pytest.raises(ValueError, match="BGR uint8"):
        encode_frame(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="quality"):
        encode_frame(np.zeros((8, 8, 3), np.uint8), quality=0)


def test_a_lossless_webp_header_is_read_too(frame: np.ndarray) -> None:
    cv2 = import_cv2()
    ok, encoded = cv2.imencode(".webp", frame[:100, :150], [cv2.IMWRITE_WEBP_QUALITY, 101])  # VP8L
    assert ok
    assert image_size(encoded.tobytes()) == ("webp", 150, 100)
    np.testing.assert_array_equal(decode_frame(encoded.tobytes()), frame[:100, :150])
