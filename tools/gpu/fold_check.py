"""Folded preprocessing on each provider onnxruntime offers here: the demo detector's score on the
astronaut, and what the fold makes of a frame (an echo model), in both fold forms.

Usage: python tools/gpu/fold_check.py   (run on a host with onnxruntime-gpu; prints a table)

The integer form resizes the raw uint8 NHWC frame (the CPU fold); the float form casts to float NCHW
first (the fold for every other provider). On a provider where the integer form is wrong, its pixels
differ from cv2.resize's by far more than a grey level and the detector's score drops.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.core.preprocess import PreprocessSpec  # noqa: E402
from edge_sdk.graph.options import FRAME_INPUT  # noqa: E402
from edge_sdk.graph.preprocess_folding import PreprocessFolding  # noqa: E402

MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"


def echo_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["pixels"], ["echo"])],
        "echo",
        [helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", 300, 300, 3])],
        [helper.make_tensor_value_info("echo", TensorProto.UINT8, ["N", 300, 300, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every onnxruntime since 1.10 reads
    return model


def run(model: onnx.ModelProto, provider: str, frame: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    chain = list(dict.fromkeys([provider, "CPUExecutionProvider"]))
    session = ort.InferenceSession(model.SerializeToString(), providers=chain)
    return session.run(None, {FRAME_INPUT: frame[np.newaxis]}), session.get_providers()


def main() -> None:
    cv2 = import_cv2()
    frame = cv2.resize(cv2.imread(str(ASTRONAUT)), (1280, 720))
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    print(f"onnxruntime {ort.__version__}, providers here: {ort.get_available_providers()}")
    spec = PreprocessSpec(color="rgb", layout="nhwc", dtype="uint8", resize=(300, 300))
    detector, echo = onnx.load(str(MODEL)), echo_model()
    want = cv2.resize(frame, (300, 300), interpolation=cv2.INTER_LINEAR)[..., ::-1].astype(np.int16)
    for integer in (True, False):
        form = "uint8 NHWC resize" if integer else "float NCHW resize"
        folded_detector = PreprocessFolding(spec, "image_tensor:0", integer).apply(detector)
        folded_echo = PreprocessFolding(spec, "pixels", integer).apply(echo)
        for provider in providers:
            outputs, used = run(folded_detector, provider, frame)
            (pixels,), _ = run(folded_echo, provider, frame)
            diff = np.abs(pixels[0].astype(np.int16) - want)
            scores = outputs[2][0]
            print(
                f"{form:18s} {provider:22s} (ran on {used[0]}): best score {scores.max():.3f}, "
                f"{int((scores > 0.5).sum())} over 0.5; pixels vs cv2: max diff {int(diff.max())}, "
                f"{100 * float((diff > 1).mean()):.1f}% off by more than 1"
            )


if __name__ == "__main__":
    main()
