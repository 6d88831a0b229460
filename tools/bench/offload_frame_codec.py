"""What `cloud` mode's frame costs: OpenCV's imencode/imdecode (cloud_offload/frame_codec.py) against
simplejpeg, side by side, on the demo frames (the virtual camera over the astronaut photo that `make
demo`'s video is made of) at 300x300 (the detector's input) and 640x480 (the demo camera).

Usage: python tools/bench/offload_frame_codec.py [--frames 60] [--qualities 50,75,90]

Per size and quality: encode and decode milliseconds per frame (median over the frames, one
thread, after a warm-up pass) and mean bytes per frame, for OpenCV JPEG, simplejpeg (4:2:0 like
OpenCV's default, so the two make comparable files; `pip install simplejpeg`, skipped without it)
and OpenCV WebP. Decoding goes through frame_codec.decode_frame for OpenCV (its header check
included) and simplejpeg.decode_jpeg for simplejpeg.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cloud_offload.frame_codec import decode_frame, encode_frame  # noqa: E402
from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.sources.synthetic import PanZoomSource  # noqa: E402

ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
SIZES = ((300, 300), (640, 480))

Codec = tuple[Callable[[np.ndarray, int], bytes], Callable[[bytes], np.ndarray]]


def demo_frames(size: tuple[int, int], count: int) -> list[np.ndarray]:
    with PanZoomSource(ASTRONAUT, frames=count, size=size) as source:
        return [frame.image for frame in source]


def codecs() -> dict[str, Codec]:
    found: dict[str, Codec] = {
        "opencv-jpeg": (lambda f, q: encode_frame(f, quality=q), decode_frame),
        "opencv-webp": (lambda f, q: encode_frame(f, quality=q, image_format="webp"), decode_frame),
    }
    try:
        import simplejpeg
    except ImportError:
        print("simplejpeg is not installed: pip install simplejpeg to compare it", file=sys.stderr)
        return found
    found["simplejpeg"] = (
        lambda f, q: simplejpeg.encode_jpeg(f, quality=q, colorspace="BGR", colorsubsampling="420"),
        lambda data: simplejpeg.decode_jpeg(data, colorspace="BGR"),
    )
    return found


def measure(frames: list[np.ndarray], codec: Codec, quality: int) -> tuple[float, float, float]:
    """(encode ms, decode ms, mean bytes) per frame."""
    encode, decode = codec
    for frame in frames[:5]:
        decode(encode(frame, quality))
    encode_ms, decode_ms, sizes = [], [], []
    for frame in frames:
        started = time.perf_counter()
        data = encode(frame, quality)
        encoded = time.perf_counter()
        decode(data)
        encode_ms.append((encoded - started) * 1000)
        decode_ms.append((time.perf_counter() - encoded) * 1000)
        sizes.append(len(data))
    return statistics.median(encode_ms), statistics.median(decode_ms), statistics.fmean(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--qualities", default="50,75,90", help="comma-separated JPEG/WebP qualities")
    args = parser.parse_args()
    qualities = [int(q) for q in args.qualities.split(",")]
    import_cv2().setNumThreads(1)
    found = codecs()
    names = list(found)
    header = "size     q  " + "".join(f"| {name:>11} enc ms  dec ms    bytes " for name in names)
    print(header)
    print("-" * len(header))
    for size in SIZES:
        frames = demo_frames(size, args.frames)
        for quality in qualities:
            cells = []
            for name in names:
                encode_ms, decode_ms, nbytes = measure(frames, found[name], quality)
                cells.append(f"| {'':>11} {encode_ms:6.2f}  {decode_ms:6.2f}  {nbytes:7.0f} ")
            print(f"{size[0]}x{size[1]:<4} {quality:3d}  " + "".join(cells))


if __name__ == "__main__":
    main()
