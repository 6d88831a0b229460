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


def write_example_models(out_dir: Path) -> list[Path]:
    return [colour_yolov8(out_dir / "colour_yolov8.onnx"), colour_classifier(out_dir / "colour_classifier.onnx")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("build/models"))
    for path in write_example_models(parser.parse_args().out_dir):
        print(path)


if __name__ == "__main__":
    main()
