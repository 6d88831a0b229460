"""Run a model with ONNX Runtime (CPU, its own graph optimisations off, so only our passes count)
and compare outputs before and after a pass."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort

RTOL = 1e-4
ATOL = 1e-5
"""Outputs must match within rtol 1e-4 and atol 1e-5 times the output's largest magnitude (at least
1): folding changes the order of float32 arithmetic, so errors scale with the values."""


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(out) for out in session.run(None, feeds)]


def assert_same_outputs(before: onnx.ModelProto, after: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    expected, got = run(before, feeds), run(after, feeds)
    assert len(got) == len(expected), "the pass must keep every output"
    names = [o.name for o in before.graph.output]
    assert [o.name for o in after.graph.output] == names, "graph output names must not change"
    for name, want, have in zip(names, expected, got, strict=True):
        assert have.shape == want.shape, f"{name}: shape changed from {want.shape} to {have.shape}"
        scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
        error = float(np.abs(have.astype(np.float64) - want).max()) if want.size else 0.0
        assert np.allclose(have, want, rtol=RTOL, atol=ATOL * scale), f"{name}: max abs error {error:.3g}"


def ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node)


def images(batch: int, size: int = 224, seed: int = 1) -> dict[str, np.ndarray]:
    return {"images": np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)}
