"""Tiny models and data for the INT8 analysis tests: one layer that INT8 breaks, the others harmless."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tools.harness import onnx_models

SENSITIVE_NODE = "conv_a"
"""It reads the model input, whose calibrated range a few spiked pixels stretch to ~[-4, 3000] (see
`labelled_samples`): quantised there, ordinary pixels all fall on the INT8 zero. The Clip after it keeps
the spikes out of every later range, so no other node is hurt."""
SPIKED_TENSOR = "images"

HARMLESS_NODES = ("conv_b", "fc")


def outlier_cnn(path: Path, classes: int = 4, size: int = 8) -> Path:
    """float32 [N, 3, size, size] -> conv_a -> Clip(-8, 8) -> conv_b -> ReLU -> global pool -> fc -> logits."""
    rng = np.random.default_rng(11)
    conv_a_w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5
    conv_a_b = np.zeros(8, np.float32)
    conv_b_w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.3
    fc_w = rng.standard_normal((classes, 8)).astype(np.float32)
    initializers = [
        numpy_helper.from_array(conv_a_w, "conv_a_w"),
        numpy_helper.from_array(conv_a_b, "conv_a_b"),
        numpy_helper.from_array(conv_b_w, "conv_b_w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "conv_b_b"),
        numpy_helper.from_array(fc_w, "fc_w"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"),
        numpy_helper.from_array(np.array(-8.0, np.float32), "clip_min"),
        numpy_helper.from_array(np.array(8.0, np.float32), "clip_max"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv_a_w", "conv_a_b"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["a", "clip_min", "clip_max"], ["a_clipped"], name="clip_a"),
        helper.make_node("Conv", ["a_clipped", "conv_b_w", "conv_b_b"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["b_relu"], name="relu_b"),
        helper.make_node("GlobalAveragePool", ["b_relu"], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "outlier_cnn",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializers,
    )
    model = onnx_models.make_model(graph, 17)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def labelled_samples(
    model_path: Path, count: int = 64, seed: int = 3, spike: float = 3000.0
) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """Random images and, as labels, the FP32 model's own top-1 (so FP32 accuracy is 100%).

    Every 4th sample, starting with the first, has one pixel at `spike`: calibration (which sees them,
    since the held-out samples are every 4th starting with the fourth) gets a range stretched by outliers.
    """
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    samples = [{"images": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(count)]
    for index in range(0, count, 4):
        samples[index]["images"][0, 0, 4, 4] = spike
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    labels = np.array([int(np.argmax(session.run(None, sample)[0])) for sample in samples])
    return samples, labels


def save_npz(path: Path, samples: list[dict[str, np.ndarray]], labels: np.ndarray | None = None) -> Path:
    arrays = {"images": np.concatenate([s["images"] for s in samples])}
    if labels is not None:
        arrays["labels"] = labels
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path
