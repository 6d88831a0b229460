"""Minimum cuts of a branched model (cloud_offload/dag_cuts.py): cuts no prefix of its node order has,
and heads and tails that still compute the whole model."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from cloud_offload.dag_cuts import min_cuts
from cloud_offload.partition import computed_tensors, cut_points, measure_cuts, measure_tensors, split_model

SIZE = 16


def two_branch_model() -> onnx.ModelProto:
    """x -> stem (8 channels) -> branch a: a1 (8) -> a2 (1 channel) -> a3 (a costly refinement of a2's
    map), branch b: b1 (8) -> b2 (1); out = a3 + b2. The node order runs branch a to its end before b
    starts, so every prefix with b2 in the head also has the costly a3."""
    rng = np.random.default_rng(3)

    def weight(name: str, c_out: int, c_in: int, kernel: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal((c_out, c_in, kernel, kernel)).astype(np.float32), name)

    def conv(name: str, source: str, kernel: int = 3) -> onnx.NodeProto:
        return helper.make_node("Conv", [source, f"{name}.w"], [name], pads=[kernel // 2] * 4, name=name)

    weights = [
        weight("stem.w", 8, 3, 3),
        weight("a1.w", 8, 8, 3),
        weight("a2.w", 1, 8, 1),
        weight("a3.w", 1, 1, 7),
        weight("b1.w", 8, 8, 3),
        weight("b2.w", 1, 8, 1),
    ]
    nodes = [
        conv("stem", "x"),
        conv("a1", "stem"),
        conv("a2", "a1", 1),
        conv("a3", "a2", 7),
        conv("b1", "stem"),
        conv("b2", "b1", 1),
        helper.make_node("Add", ["a3", "b2"], ["out"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, SIZE, SIZE])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [out.name for out in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


FEED = {"x": np.random.default_rng(0).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)}
# stem, a1, a2, a3 (costly), b1, b2, add
NODE_MS = [1.0, 1.0, 0.1, 20.0, 1.0, 0.1, 0.1]


def test_the_minimum_cut_keeps_the_costly_node_off_the_edge_where_no_prefix_can() -> None:
    model = two_branch_model()
    sizes = {name: sample.bytes for name, sample in measure_tensors(model, FEED, computed_tensors(model)).items()}
    prefixes = {frozenset(cut.tensors) for cut in cut_points(model)}
    # when
    cuts = min_cuts(model, NODE_MS, sizes)
    # then one head computes both branches' 1-channel maps but not a3: it sends 2 maps, no prefix does
    found = {frozenset(cut.tensors) for cut in cuts}
    assert frozenset({"a2", "b2"}) in found, found
    assert frozenset({"a2", "b2"}) not in prefixes, prefixes
    best = next(cut for cut in cuts if set(cut.tensors) == {"a2", "b2"})
    assert 3 not in best.head and {0, 1, 2, 4, 5} <= best.head


def test_every_minimum_cut_splits_into_a_head_and_tail_that_compute_the_whole_model() -> None:
    model = two_branch_model()
    sizes = {name: sample.bytes for name, sample in measure_tensors(model, FEED, computed_tensors(model)).items()}
    whole = run(model, FEED)["out"]
    cuts = min_cuts(model, NODE_MS, sizes)
    assert cuts
    for measured in measure_cuts(model, cuts, FEED):
        head, tail = split_model(model, measured)
        assert "x" not in {value.name for value in tail.graph.input}, "the tail never reads the frame"
        np.testing.assert_allclose(run(tail, run(head, FEED))["out"], whole, rtol=1e-4, atol=1e-4)


def test_the_heads_grow_as_bytes_get_dearer() -> None:
    model = two_branch_model()
    sizes = {name: sample.bytes for name, sample in measure_tensors(model, FEED, computed_tensors(model)).items()}
    heads = [cut.head for cut in min_cuts(model, NODE_MS, sizes)]
    assert all(smaller < larger for smaller, larger in itertools.pairwise(heads)), "nested, smallest first"
