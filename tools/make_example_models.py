"""Write the example models of docs/models.md and pipelines/yolo.yaml: a YOLOv8-shaped colour
detector and a colour classifier (tools/harness/onnx_models.py; small real ONNX, no download).

Usage: python tools/make_example_models.py [OUT_DIR]   (default build/models)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tools.harness.onnx_models import colour_classifier, colour_yolov8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("build/models"))
    args = parser.parse_args()
    for path in (
        colour_yolov8(args.out_dir / "colour_yolov8.onnx"),
        colour_classifier(args.out_dir / "colour_classifier.onnx"),
    ):
        print(path)


if __name__ == "__main__":
    main()
