"""One engine, one input tensor, two machines: do ONNX Runtime's aarch64 kernels give x86's numbers?

Usage (tools/check_aarch64.sh runs these; `run` once natively, once under qemu):
  python tools/aarch64/same_input.py run VIDEO REF.npz OUT.npz ENGINE.onnx [ENGINE.onnx ...]
  python tools/aarch64/same_input.py compare X86.npz ARM.npz

`run` decodes the first 12 frames of VIDEO with this machine's OpenCV and resizes them to the demo
detector's 300x300 RGB as the pipeline does (cv2.resize, INTER_LINEAR); when REF.npz exists (the
native run's file) each ENGINE runs on REF's tensors, so both machines feed the same bytes, otherwise
on its own. `compare` prints how far the two machines' decoding, resize and engine outputs differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

FRAMES = 12
SIZE = (300, 300)
STRONG = 0.3  # detections at least this sure (the demo keeps >= 0.5)


def run(video: Path, ref_path: Path, out: Path, engines: list[Path]) -> None:
    import cv2
    import onnxruntime as ort

    capture = cv2.VideoCapture(str(video))
    frames = []
    while len(frames) < FRAMES:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    decoded = np.stack(frames)
    ref = np.load(ref_path) if ref_path.exists() else None
    source = ref["decoded"] if ref is not None else decoded
    resized = np.stack(
        [cv2.resize(cv2.cvtColor(f, cv2.COLOR_BGR2RGB), SIZE, interpolation=cv2.INTER_LINEAR) for f in source]
    )
    feed = ref["resized"] if ref is not None else resized
    arrays = {"decoded": decoded, "resized": resized}
    for index, engine in enumerate(engines):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the engine is optimised
        session = ort.InferenceSession(str(engine), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        results = [session.run(None, {name: tensor[None]}) for tensor in feed]
        for k, output in enumerate(session.get_outputs()):
            arrays[f"engine{index}/{output.name}"] = np.stack([r[k] for r in results])
    np.savez(out, **arrays)


def compare(x86_path: Path, arm_path: Path) -> None:
    x86, arm = np.load(x86_path), np.load(arm_path)
    for name, what in (
        ("decoded", "video decode (each machine's OpenCV/FFmpeg)"),
        ("resized", "cv2.resize of x86's frames"),
    ):
        diff = np.abs(x86[name].astype(np.int16) - arm[name].astype(np.int16))
        print(f"{what}: {(diff > 0).mean():.1%} of values differ, max {diff.max()}")
    for name in sorted(n for n in x86.files if n.startswith("engine")):
        diff = np.abs(x86[name].astype(np.float64) - arm[name].astype(np.float64))
        print(f"{name} on the same tensor: max abs difference {diff.max():.3g}")
    # Detector outputs come in score order: near-ties among low scores swap places between machines.
    for scores_name in sorted(n for n in x86.files if n.startswith("engine") and "scores" in n):
        engine = scores_name.split("/")[0]
        strong = np.maximum(x86[scores_name], arm[scores_name]) >= STRONG
        worst = 0.0
        for name in (n for n in x86.files if n.startswith(engine + "/")):
            diff = np.abs(x86[name].astype(np.float64) - arm[name].astype(np.float64))
            if diff.shape[: strong.ndim] == strong.shape and strong.any():
                worst = max(worst, float(diff[strong].max()))
        print(
            f"{engine}: detections scoring >= {STRONG} ({int(strong.sum())}): max difference of any output {worst:.3g}"
        )


def main() -> None:
    if len(sys.argv) >= 6 and sys.argv[1] == "run":
        run(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), [Path(p) for p in sys.argv[5:]])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
