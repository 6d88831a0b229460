"""SsdSplit: the cut graph computes exactly the tensors where the uncut graph's post-processing starts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.graph.optimize import optimize_graph
from edge_sdk.graph.options import FRAME_INPUT, GraphOptions
from edge_sdk.graph.preprocess_folding import PreprocessFolding
from edge_sdk.graph.ssd_split import BOX_ENCODINGS, CLASS_SCORES, SsdSplit

from .helpers import ops, run

pytest.importorskip("onnxruntime")

RAW = ("Squeeze:0", "Postprocessor/Slice:0")
"""The uncut graph's encodings and converted scores (tests/graph/test_ssd_head.py)."""
SPEC = PreprocessSpec(resize=(300, 300), color="rgb", layout="nhwc", dtype="uint8")


def with_raw_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The uncut graph, also returning the tensors its post-processing starts from."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.extend([helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in RAW])
    return copy


def rgb(image: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    if size is not None:
        image = import_cv2().resize(image, size)
    return np.ascontiguousarray(image[np.newaxis, :, :, ::-1])


def test_ssd_split_when_frames_have_any_size_resizes_the_batch_as_the_loop_did_and_matches_exactly(
    detector: onnx.ModelProto, astronaut_bgr: np.ndarray
) -> None:
    # given a frame that is not 300x300, so the graph's own resize matters
    frame = rgb(astronaut_bgr, (480, 360))
    split = SsdSplit()

    # when
    cut = split.apply(detector)

    # then
    assert [o.name for o in cut.graph.output] == [BOX_ENCODINGS, CLASS_SCORES], "the cut graph's outputs"
    assert {"Loop", "NonMaxSuppression", "Exp"}.isdisjoint(ops(cut)), "no Loop, no NMS, no box decoder remains"
    assert "Resize" in ops(cut), "the per-image resize became one Resize of the batch"
    expected = run(with_raw_outputs(detector), {"image_tensor:0": frame})[-2:]
    got = run(cut, {"image_tensor:0": frame})
    for name, want, have in zip(RAW, expected, got, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} must come out unchanged")


def test_ssd_split_when_the_folded_preprocessing_already_resized_drops_the_resize_and_matches_exactly(
    detector: onnx.ModelProto, astronaut_bgr: np.ndarray
) -> None:
    # given the pipeline's preprocessing folded in: the graph sees 300x300 frames
    folded = PreprocessFolding(SPEC, "image_tensor:0").apply(detector)
    frame = np.ascontiguousarray(astronaut_bgr[np.newaxis])
    split = SsdSplit()

    # when
    cut = split.apply(folded)

    # then
    assert "dropped" in split.detail, "a 300x300 input needs no second resize"
    assert ops(cut)["Resize"] == 1, "only the folded preprocessing's resize is left"
    expected = run(with_raw_outputs(folded), {FRAME_INPUT: frame})[-2:]
    got = run(cut, {FRAME_INPUT: frame})
    for name, want, have in zip(RAW, expected, got, strict=True):
        np.testing.assert_array_equal(have, want, err_msg=f"{name} must be bit-equal: the same nodes computed it")


def test_ssd_split_when_a_batch_holds_different_frames_gives_each_its_own_outputs(
    detector: onnx.ModelProto, astronaut_bgr: np.ndarray
) -> None:
    # given two different frames in one batch
    first = rgb(astronaut_bgr, (300, 300))
    second = rgb(astronaut_bgr[::-1].copy(), (300, 300))
    cut = SsdSplit().apply(detector)

    # when
    together = run(cut, {"image_tensor:0": np.concatenate([first, second])})
    alone = [run(cut, {"image_tensor:0": frame}) for frame in (first, second)]

    # then
    for index, outputs in enumerate(alone):
        for together_output, alone_output in zip(together, outputs, strict=True):
            # (a batch may sum in another order: the H200 host's AVX-512 kernels differed by 3e-6)
            np.testing.assert_allclose(together_output[index], alone_output[0], rtol=1e-5, atol=1e-5)


def test_optimize_graph_when_ssd_split_is_asked_runs_the_split_after_folding_and_keeps_the_cut_outputs(
    detector: onnx.ModelProto,
) -> None:
    # when
    optimized, reports = optimize_graph(
        detector, GraphOptions(preprocess=SPEC, input_name="image_tensor:0", ssd_split=True)
    )

    # then
    assert [r.name for r in reports][:2] == ["preprocess_folding", "ssd_split"], "split right after the fold"
    assert [o.name for o in optimized.graph.output] == [BOX_ENCODINGS, CLASS_SCORES]
    assert "Loop" not in ops(optimized), "nothing of TF's post-processing is left"


def test_graph_options_fingerprint_when_ssd_split_is_off_is_unchanged_and_when_on_differs() -> None:
    # then
    assert "ssd_split" not in GraphOptions(preprocess=SPEC).to_dict(), "engines built before the split keep their key"
    assert GraphOptions(preprocess=SPEC).fingerprint() != GraphOptions(preprocess=SPEC, ssd_split=True).fingerprint()
