"""The frame a `cloud` request carries: downscaled to what the model takes, then JPEG or WebP.

The edge never sends more pixels than the model input uses: the frame is shrunk (aspect ratio kept,
INTER_AREA, which averages instead of skipping pixels) until its longer side is the model input's
longer side, then encoded with OpenCV. OpenCV, not simplejpeg: both wrap libjpeg-turbo, and on the
demo frames they encode at the same speed and size (300x300 q75: 0.36 against 0.33 ms, 16.6 KB
both; 640x480 q75: 1.0 ms, 39.9 KB both; tools/bench/offload_frame_codec.py); OpenCV is already on
every edge box (JetPack's own build included, where no simplejpeg wheel may exist) and also writes
WebP, about 35% smaller at the same quality but some 30x slower to encode (10 ms at 300x300), which
pays only on a link under about 5 Mbit/s.

The worker decodes what any client sent, so decoding is bounded: the image's size is read from its
JPEG or WebP header before any pixel is decoded, and an image over `max_pixels` is refused without
allocating it; everything that is not a well-formed JPEG or WebP of a BGR frame is one PayloadError.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from edge_sdk.core.opencv import import_cv2

from .tensor_codec import PayloadError

ImageFormat = Literal["jpeg", "webp"]
MAX_PIXELS = 4096 * 4096
"""The most pixels a worker decodes by default (a 4096x4096 BGR frame is 48 MiB)."""

_JPEG_FRAME_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""SOF0..SOF15 (baseline, progressive, lossless...), but DHT, JPG and DAC, which share the range."""
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def downscale(frame: np.ndarray, max_side: int | None) -> np.ndarray:
    """`frame` shrunk so its longer side is at most `max_side` (aspect ratio kept); as is when it fits."""
    _check_frame(frame)
    height, width = frame.shape[:2]
    if max_side is None or max(height, width) <= max_side:
        return frame
    if max_side < 1:
        raise ValueError(f"expected max_side >= 1, got {max_side}")
    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    resized: np.ndarray = import_cv2().resize(frame, size, interpolation=import_cv2().INTER_AREA)
    return resized


def encode_frame(
    frame: np.ndarray, max_side: int | None = None, quality: int = 80, image_format: ImageFormat = "jpeg"
) -> bytes:
    """A BGR uint8 frame as JPEG or WebP bytes at `quality` (1-100), downscaled to `max_side` first."""
    if not 1 <= quality <= 100:
        raise ValueError(f"expected a quality from 1 to 100, got {quality}")
    cv2 = import_cv2()
    image = np.ascontiguousarray(downscale(frame, max_side))
    if image_format == "jpeg":
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    elif image_format == "webp":
        ok, encoded = cv2.imencode(".webp", image, [cv2.IMWRITE_WEBP_QUALITY, quality])
    else:
        raise ValueError(f"expected image format jpeg or webp, got {image_format!r}")
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape[1]}x{image.shape[0]} frame as {image_format}")
    return bytes(encoded.tobytes())


def image_size(data: bytes) -> tuple[ImageFormat, int, int]:
    """(format, width, height) from a JPEG's or WebP's header, without decoding; PayloadError otherwise."""
    view = memoryview(data)
    if bytes(view[:2]) == b"\xff\xd8":
        return ("jpeg", *_jpeg_size(view))
    if bytes(view[:4]) == b"RIFF" and bytes(view[8:12]) == b"WEBP":
        return ("webp", *_webp_size(view))
    raise PayloadError(f"expected a JPEG or WebP image, got {len(view)} bytes starting {bytes(view[:4]).hex()}")


def decode_frame(data: bytes, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """The BGR uint8 HxWx3 frame in `data` (JPEG or WebP); PayloadError for anything else, or for an
    image of more than `max_pixels`, refused from its header before it is decoded."""
    image_format, width, height = image_size(data)
    if width < 1 or height < 1 or width * height > max_pixels:
        raise PayloadError(f"expected an image of 1 to {max_pixels} pixels, got {width}x{height} ({image_format})")
    cv2 = import_cv2()
    # The header's orientation is the frame's: an EXIF rotation (none from the edge) is not applied.
    flags = cv2.IMREAD_COLOR | getattr(cv2, "IMREAD_IGNORE_ORIENTATION", 0)
    try:
        frame = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error as exc:
        raise PayloadError(f"the {image_format} image does not decode ({str(exc).strip().splitlines()[-1]})") from None
    if frame is None:
        raise PayloadError(f"the {image_format} image does not decode ({width}x{height} in its header)")
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise PayloadError(f"expected a BGR uint8 image, got {frame.dtype} {frame.shape}")
    if frame.shape[0] * frame.shape[1] > max_pixels:  # a header that lied about the size
        raise PayloadError(f"expected an image of at most {max_pixels} pixels, got {frame.shape[1]}x{frame.shape[0]}")
    return frame


def _check_frame(frame: np.ndarray) -> None:
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or 0 in frame.shape:
        raise ValueError(f"expected a BGR uint8 HxWx3 frame, got {frame.dtype} {frame.shape}")


def _jpeg_size(view: memoryview) -> tuple[int, int]:
    """The size in the first frame header (SOFn) of a JPEG, walking its marker segments."""
    position = 2
    while position + 4 <= len(view):
        if view[position] != 0xFF:
            raise PayloadError(f"a garbled JPEG: no marker at byte {position}")
        marker = view[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if marker in _JPEG_STANDALONE:
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image or start of scan before any frame header
            break
        length = int.from_bytes(view[position + 2 : position + 4], "big")
        if length < 2:
            raise PayloadError(f"a garbled JPEG: segment length {length} at byte {position}")
        if marker in _JPEG_FRAME_MARKERS:
            if position + 9 > len(view):
                break
            height = int.from_bytes(view[position + 5 : position + 7], "big")
            width = int.from_bytes(view[position + 7 : position + 9], "big")
            return width, height
        position += 2 + length
    raise PayloadError("a truncated JPEG: no frame header")


def _webp_size(view: memoryview) -> tuple[int, int]:
    """The canvas size in a WebP's first chunk: VP8 (lossy), VP8L (lossless) or VP8X (extended)."""
    chunk, body = bytes(view[12:16]), view[20:30]
    if chunk == b"VP8 " and len(body) >= 10 and bytes(body[3:6]) == b"\x9d\x01\x2a":
        return (
            int.from_bytes(body[6:8], "little") & 0x3FFF,
            int.from_bytes(body[8:10], "little") & 0x3FFF,
        )
    if chunk == b"VP8L" and len(body) >= 5 and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(body) >= 10:
        return int.from_bytes(body[4:7], "little") + 1, int.from_bytes(body[7:10], "little") + 1
    raise PayloadError(f"a truncated or garbled WebP (first chunk {chunk!r})")
