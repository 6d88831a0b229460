"""Write the demo video: a virtual camera panning and zooming across a public-domain photo.

Usage: python tools/make_demo_video.py OUT.mp4 [--frames 300] [--size 640x480] [--image PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_sdk.core.opencv import import_cv2
from edge_sdk.sources.synthetic import PanZoomSource

ASSET = Path(__file__).resolve().parent / "assets" / "astronaut.jpg"


def write_demo_video(out: Path, frames: int = 300, size: tuple[int, int] = (640, 480), image: Path = ASSET) -> Path:
    cv2 = import_cv2()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.stem + ".partial" + out.suffix)
    writer = cv2.VideoWriter(str(partial), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, size)
    if not writer.isOpened():
        raise SystemExit(f"OpenCV cannot write mp4v video to {partial}")
    with PanZoomSource(image, frames=frames, size=size) as source:
        for frame in source:
            writer.write(frame.image)
    writer.release()
    partial.replace(out)  # a half-written video never stands at the final name
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--size", default="640x480", help="WIDTHxHEIGHT")
    parser.add_argument("--image", type=Path, default=ASSET)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    path = write_demo_video(args.out, args.frames, (width, height), args.image)
    print(f"wrote {args.frames} frames ({width}x{height}) to {path}")


if __name__ == "__main__":
    main()
