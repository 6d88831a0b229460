"""Make tests/fixtures/yolo/nudenet_320n_astronaut.npz: a real YOLOv8n head output and reference boxes.

Dev-time only (it downloads; tests never do). Steps:
1. `pip download --no-deps nudenet==3.4.2` into a temp dir (or take --wheel), and read from the wheel
   the YOLOv8n detector `nudenet/320n.onnx` and the class names (the `__labels` list in nudenet.py).
2. Take the top 512x384 of tools/assets/astronaut.jpg (so the letterbox has padding to undo),
   letterbox it to 320x320 with edge_sdk's Preprocessor, and run the detector with ONNX Runtime.
3. Decode the raw `output0` [1, 22, 2100] with the plain reference below, written row by row after
   the recipe nudenet and Ultralytics document (best class per anchor, score threshold, cx/cy/w/h to
   corners, greedy NMS best-first, at most max_det boxes, undo the letterbox, clip to the frame),
   for a few settings; none of edge_sdk's post-processing code is used for the reference.
4. Save the raw output (float32), the geometry numbers, the labels and the reference boxes.

Usage: python tools/export_yolo_fixture.py [--wheel nudenet-3.4.2-py3-none-any.whl] [--out PATH]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec

REPO = Path(__file__).resolve().parent.parent
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
OUT = REPO / "tests" / "fixtures" / "yolo" / "nudenet_320n_astronaut.npz"
NUDENET = "nudenet==3.4.2"
FRAME_ROWS = 384
"""The top 512x384 of the 512x512 photo: letterboxing it to 320x320 pads 40 rows above and below."""

# name: (score threshold, IoU threshold, class-agnostic NMS, max detections)
CASES: dict[str, tuple[float, float, bool, int]] = {
    # nudenet's own settings: one NMS over every class at 0.25 / 0.45.
    "nudenet_defaults": (0.25, 0.45, True, 300),
    # Low enough that other classes appear, one of them (FACE_MALE) on the same face.
    "low_threshold_per_class": (0.02, 0.45, False, 300),
    "low_threshold_agnostic": (0.02, 0.45, True, 300),
    "low_threshold_top2": (0.02, 0.45, False, 2),
}


def fetch_wheel(folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", NUDENET, "-d", str(folder)], check=True
    )
    (wheel,) = folder.glob("nudenet-*.whl")
    return wheel


def read_wheel(wheel: Path, folder: Path) -> tuple[Path, list[str]]:
    """The detector, extracted into `folder`, and the class names from nudenet's source."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder, [name for name in archive.namelist() if name.startswith("nudenet/")])
    model = folder / "nudenet" / "320n.onnx"
    source = (folder / "nudenet" / "nudenet.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__labels" for t in node.targets):
            labels = ast.literal_eval(node.value)
            break
    else:
        raise SystemExit("nudenet.py has no __labels list; has the wheel changed?")
    return model, list(labels)


def nudenet_own_detections(folder: Path, frame: np.ndarray) -> list[dict[str, object]]:
    """What nudenet's own detector says on the frame (its own letterbox: pad right and bottom), as a cross-check."""
    sys.path.insert(0, str(folder))
    try:
        from nudenet.nudenet import NudeDetector

        detections: list[dict[str, object]] = NudeDetector().detect(frame)
    finally:
        sys.path.remove(str(folder))
    return detections


def model_metadata(model: Path) -> dict[str, str]:
    import onnx

    return {prop.key: prop.value for prop in onnx.load(str(model), load_external_data=False).metadata_props}


def run_detector(model: Path, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Raw output0 and the geometry numbers (input w, h, scale x, y, pad x, y)."""
    import onnxruntime

    model_file = ModelFile.load(model)
    spec = PreprocessSpec(
        resize=(320, 320), resize_mode="letterbox", layout="nchw", dtype="float32", scale=1 / 255, color="rgb"
    )
    preprocess = Preprocessor(spec, model_file.inputs[0])
    geometry = preprocess.geometry(frame.shape[1], frame.shape[0])
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (output0,) = session.run(["output0"], {model_file.inputs[0].name: preprocess(frame)})
    numbers = np.array(
        [
            geometry.input_width,
            geometry.input_height,
            geometry.scale_x,
            geometry.scale_y,
            geometry.pad_x,
            geometry.pad_y,
        ],
        dtype=np.float64,
    )
    return np.asarray(output0, dtype=np.float32), numbers


def iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 1.0


def reference_decode(
    output0: np.ndarray,
    geometry: np.ndarray,
    frame_size: tuple[int, int],
    score_threshold: float,
    iou_threshold: float,
    agnostic: bool,
    max_det: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes (x1, y1, x2, y2 in frame pixels), scores and class ids, best first."""
    _, _, scale_x, scale_y, pad_x, pad_y = (float(v) for v in geometry)
    candidates = []
    for row in output0[0].T.astype(np.float64):  # one anchor: cx, cy, w, h, 18 class scores
        class_id = int(np.argmax(row[4:]))
        score = float(row[4 + class_id])
        if score > score_threshold:
            cx, cy, w, h = (float(v) for v in row[:4])
            candidates.append((score, class_id, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
    candidates.sort(key=lambda c: -c[0])
    kept: list[tuple[float, int, tuple[float, float, float, float]]] = []
    for score, class_id, box in candidates:
        if len(kept) == max_det:
            break
        rivals = [k for k in kept if agnostic or k[1] == class_id]
        if all(iou(k[2], box) <= iou_threshold for k in rivals):
            kept.append((score, class_id, box))
    width, height = frame_size
    boxes = [
        (
            min(max((x1 - pad_x) / scale_x, 0.0), width),
            min(max((y1 - pad_y) / scale_y, 0.0), height),
            min(max((x2 - pad_x) / scale_x, 0.0), width),
            min(max((y2 - pad_y) / scale_y, 0.0), height),
        )
        for _, _, (x1, y1, x2, y2) in kept
    ]
    return (
        np.array(boxes, dtype=np.float64).reshape(-1, 4),
        np.array([k[0] for k in kept], dtype=np.float64),
        np.array([k[1] for k in kept], dtype=np.int64),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help=f"an already downloaded {NUDENET} wheel")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    cv2 = import_cv2()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wheel = args.wheel or fetch_wheel(folder)
        model, labels = read_wheel(wheel, folder)
        metadata = model_metadata(model)
        if ast.literal_eval(metadata["names"]) != dict(enumerate(labels)):
            raise SystemExit("the class names in nudenet.py and in the model's metadata disagree")
        image = cv2.imread(str(ASTRONAUT))
        frame = np.ascontiguousarray(image[:FRAME_ROWS])
        output0, geometry = run_detector(model, frame)
        print(
            f"nudenet's own NudeDetector().detect() on the same frame (box = x, y, w, h): {nudenet_own_detections(folder, frame)}"
        )
        model_sha256 = hashlib.sha256(model.read_bytes()).hexdigest()
        wheel_sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    import onnxruntime

    frame_size = (frame.shape[1], frame.shape[0])
    arrays: dict[str, np.ndarray] = {
        "output0": output0,
        "geometry": geometry,
        "frame_size": np.array(frame_size, dtype=np.int64),
        "labels": np.array(labels),
        "cases": np.array(list(CASES)),
        "provenance": np.array(
            f"{NUDENET} (wheel sha256 {wheel_sha256}), nudenet/320n.onnx (sha256 {model_sha256}, "
            f"Ultralytics {metadata.get('version')} export), onnxruntime {onnxruntime.__version__} CPU, "
            f"input: top {frame_size[0]}x{frame_size[1]} of tools/assets/astronaut.jpg letterboxed to 320x320 "
            "by edge_sdk's Preprocessor (RGB, NCHW, float32 / 255); made by tools/export_yolo_fixture.py"
        ),
    }
    for name, (score_threshold, iou_threshold, agnostic, max_det) in CASES.items():
        boxes, scores, classes = reference_decode(
            output0, geometry, frame_size, score_threshold, iou_threshold, agnostic, max_det
        )
        arrays[f"{name}__settings"] = np.array([score_threshold, iou_threshold, float(agnostic), max_det])
        arrays[f"{name}__boxes"] = boxes
        arrays[f"{name}__scores"] = scores
        arrays[f"{name}__classes"] = classes
        found = ", ".join(
            f"{labels[c]} {s:.3f} {np.round(b, 1).tolist()}" for b, s, c in zip(boxes, scores, classes, strict=True)
        )
        print(f"{name}: {len(boxes)} boxes: {found}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)  # type: ignore[arg-type]  # numpy types every keyword as allow_pickle
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
