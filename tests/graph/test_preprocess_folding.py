"""Preprocessing folded into real models: the folded model fed a raw BGR frame must give what the
unfused model gives when fed `Preprocessor(spec, input)(frame)`.

Tolerances: without a resize both paths do the same arithmetic (up to float32 rounding of the fused
multiply-add, or of the folded convolution weights), so outputs match to rtol 1e-4. With a resize,
ONNX Runtime's integer bilinear resize and cv2.INTER_LINEAR's fixed-point one round differently:
at most 1 grey level per pixel (about a third of the pixels differ by 1). That is what the resized
comparisons allow: pixels within 1 level, the detector's boxes (IoU > 0.95, score within 0.02), the
classifiers' top-1 and cosine > 0.999.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.core.errors import ModelError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.graph.options import FRAME_INPUT
from edge_sdk.graph.preprocess_folding import PreprocessFolding
from tools.harness import onnx_models

ort = pytest.importorskip("onnxruntime")

NORMALISED = {"dtype": "float32", "layout": "nchw", "scale": 1 / 255, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}  # fmt: skip


# --- models built here (a stem convolution with or without padding; a model that returns its input) ---


def _save(graph: onnx.GraphProto, path: Path, opset: int = onnx_models.OPSET) -> Path:
    model = onnx_models.make_model(graph, opset)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def stem_classifier(path: Path, pads: int, size: int = 32, classes: int = 5) -> Path:
    """float32 NCHW [N, 3, size, size] -> Conv 3x3 stride 2 (`pads` on every side) -> ReLU -> pool -> Gemm."""
    rng = np.random.default_rng(3)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "stem_w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "stem_b"),
        numpy_helper.from_array(rng.standard_normal((classes, 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "stem_w", "stem_b"], ["stem"], strides=[2, 2], pads=[pads] * 4),
        helper.make_node("Relu", ["stem"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "stem_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializers,
    )
    return _save(graph, path)


def echo_model(path: Path, dtype: int, shape: list[Any], opset: int = onnx_models.OPSET) -> Path:
    """Returns its input: the folded model then shows exactly what its graph made of the frame."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["pixels"], ["echo"])],
        "echo",
        [helper.make_tensor_value_info("pixels", dtype, shape)],
        [helper.make_tensor_value_info("echo", dtype, shape)],
    )
    return _save(graph, path, opset)


# --- helpers ------------------------------------------------------------------------------------------


def run(model: Path | onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feed))


RESIZE_FORMS = pytest.mark.parametrize("integer_resize", [True, False], ids=["uint8-nhwc-resize", "float-nchw-resize"])
"""The fold's two forms: the CPU one (resize on the raw uint8 frame) and the one for every other provider."""


def reference_and_folded(
    path: Path, spec: PreprocessSpec, frame: np.ndarray, integer_resize: bool = True
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(unfused model on numpy-preprocessed frame, folded model on the raw frame)."""
    model_input = ModelFile.load(path).inputs[0]
    reference = run(path, {model_input.name: Preprocessor(spec, model_input)(frame)})
    folded = PreprocessFolding(spec, model_input.name, integer_resize).apply(onnx.load(str(path)))
    onnx.checker.check_model(folded, full_check=True)
    return reference, run(folded, {FRAME_INPUT: frame[np.newaxis]})


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    top_left, bottom_right = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(bottom_right - top_left, 0, None)))
    return inter / (float(np.prod(a[2:] - a[:2])) + float(np.prod(b[2:] - b[:2])) - inter)


@pytest.fixture(scope="module")
def frame_1080p(astronaut_bgr: np.ndarray) -> np.ndarray:
    return import_cv2().resize(astronaut_bgr, (1920, 1080), interpolation=import_cv2().INTER_AREA)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("folding")
    return {
        "float_classifier": onnx_models.float_classifier(folder / "float_classifier.onnx", size=8),
        "uint8_mean_classifier": onnx_models.uint8_mean_classifier(folder / "uint8_mean_classifier.onnx"),
        "stem": stem_classifier(folder / "stem.onnx", pads=0),
        "padded_stem": stem_classifier(folder / "padded_stem.onnx", pads=1),
        "echo_uint8_nhwc": echo_model(folder / "echo_u8.onnx", TensorProto.UINT8, ["N", 96, 128, 3]),
        "echo_uint8_nchw": echo_model(folder / "echo_u8_nchw.onnx", TensorProto.UINT8, ["N", 3, 96, 128]),
        "echo_uint8_opset11": echo_model(folder / "echo_u8_11.onnx", TensorProto.UINT8, [1, 96, 128, 3], opset=11),
        "echo_float_nhwc": echo_model(folder / "echo_f32.onnx", TensorProto.FLOAT, ["N", 96, 128, 3]),
    }


# --- the shipped detector -----------------------------------------------------------------------------


def test_preprocess_folding_when_detector_gets_a_raw_1080p_frame_matches_numpy_preprocessing_exactly(
    demo_model: Path, frame_1080p: np.ndarray
) -> None:
    # given the detector (uint8 RGB NHWC, any size) and a BGR 1080p frame; no resize in the pipeline
    spec = PreprocessSpec(color="rgb", layout="nhwc", dtype="uint8")

    # when
    reference, folded = reference_and_folded(demo_model, spec, frame_1080p)

    # then
    for want, got in zip(reference, folded, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, err_msg="only the colour swap moved into the graph")


@RESIZE_FORMS
def test_preprocess_folding_when_detector_resize_is_folded_finds_the_same_person(
    demo_model: Path, frame_1080p: np.ndarray, integer_resize: bool
) -> None:
    # given the detector with preprocess.resize [300, 300], so its own graph no longer resizes 1080p floats
    spec = PreprocessSpec(color="rgb", resize=(300, 300))

    # when
    reference, folded = reference_and_folded(demo_model, spec, frame_1080p, integer_resize)

    # then (outputs: count, boxes, scores, classes)
    boxes, scores, folded_boxes, folded_scores = reference[1][0], reference[2][0], folded[1][0], folded[2][0]
    confident = scores > 0.5
    assert confident.sum() >= 1, "test setup: the unfused detector finds the astronaut"
    assert np.array_equal(folded_scores > 0.5, confident), "the same detections pass the threshold"
    for want, got in zip(boxes[confident], folded_boxes[confident], strict=True):
        assert iou(want, got) > 0.95, f"the same box: {want} vs {got}"
    assert np.abs(folded_scores[confident] - scores[confident]).max() < 0.02, "scores within 0.02"


# --- classifiers: stretch, letterbox, colour order, conv folding ------------------------------------------


@RESIZE_FORMS
@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
@pytest.mark.parametrize("color", ["rgb", "bgr"])
def test_preprocess_folding_when_float_classifier_resizes_1080p_keeps_its_top1(
    models: dict[str, Path], frame_1080p: np.ndarray, resize_mode: str, color: str, integer_resize: bool
) -> None:
    # given a float32 NCHW classifier with mean/std, 8x8, fed a 1080p frame
    spec = PreprocessSpec(**NORMALISED, resize=(8, 8), resize_mode=resize_mode, color=color)

    # when
    (reference,), (folded,) = reference_and_folded(models["float_classifier"], spec, frame_1080p, integer_resize)

    # then
    assert folded.argmax() == reference.argmax(), "the same class wins"
    assert cosine(folded, reference) > 0.999, f"logits agree: {reference} vs {folded}"


@pytest.mark.parametrize("color", ["rgb", "bgr"])
def test_preprocess_folding_when_frame_has_the_model_size_matches_exactly(
    models: dict[str, Path], astronaut_bgr: np.ndarray, color: str
) -> None:
    # given a 32x32 frame for a 32x32 normalised classifier (no resize happens on either path)
    frame = np.ascontiguousarray(astronaut_bgr[100:132, 200:232])
    spec = PreprocessSpec(**NORMALISED, resize=(32, 32), color=color)

    for name in ("stem", "padded_stem"):
        # when
        (reference,), (folded,) = reference_and_folded(models[name], spec, frame)

        # then
        np.testing.assert_allclose(folded, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max(), err_msg=name)


def test_preprocess_folding_when_stem_conv_has_no_padding_folds_normalisation_into_its_weights(
    models: dict[str, Path],
) -> None:
    # given a normalised RGB classifier whose first Conv has no padding
    spec = PreprocessSpec(**NORMALISED, resize=(32, 32), color="rgb")
    folding = PreprocessFolding(spec, "images")

    # when
    folded = folding.apply(onnx.load(str(models["stem"])))

    # then
    ops = [node.op_type for node in folded.graph.node]
    assert folding.folded_into_conv is not None, "the Conv took the colour swap and the normalisation"
    assert not {"Mul", "Add", "Gather"} & set(ops), f"no explicit swap or normalisation nodes, got {ops}"


def test_preprocess_folding_when_stem_conv_pads_keeps_explicit_normalisation(models: dict[str, Path]) -> None:
    # given the same classifier with padding 1 (a zero pad of normalised pixels is not a zero raw pixel)
    spec = PreprocessSpec(**NORMALISED, resize=(32, 32), color="rgb")
    folding = PreprocessFolding(spec, "images")

    # when
    folded = folding.apply(onnx.load(str(models["padded_stem"])))

    # then
    ops = [node.op_type for node in folded.graph.node]
    assert folding.folded_into_conv is None, "the padded Conv's weights are left alone"
    assert {"Mul", "Add", "Gather"} <= set(ops), f"swap and normalisation stay explicit, got {ops}"


@pytest.mark.parametrize("color", ["rgb", "bgr"])
def test_preprocess_folding_when_uint8_model_takes_any_size_passes_frames_of_every_size(
    models: dict[str, Path], astronaut_bgr: np.ndarray, color: str
) -> None:
    # given the uint8 NHWC mean classifier (any size), folded once
    spec = PreprocessSpec(color=color)
    path = models["uint8_mean_classifier"]
    folded = PreprocessFolding(spec, "frames").apply(onnx.load(str(path)))
    model_input = ModelFile.load(path).inputs[0]

    for height, width in ((48, 64), (512, 512), (31, 17)):
        frame = np.ascontiguousarray(astronaut_bgr[:height, :width])

        # when
        (reference,) = run(path, {"frames": Preprocessor(spec, model_input)(frame)})
        (got,) = run(folded, {FRAME_INPUT: frame[np.newaxis]})

        # then
        np.testing.assert_allclose(got, reference, rtol=1e-4, err_msg=f"{width}x{height}")


# --- what the graph makes of frames of several sizes (a model that returns its input) ---------------------

SIZES = [(1920, 1080), (640, 480), (480, 640), (128, 96), (333, 77), (50, 300)]


@RESIZE_FORMS
@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
@pytest.mark.parametrize(("model", "layout"), [("echo_uint8_nhwc", "nhwc"), ("echo_uint8_nchw", "nchw"), ("echo_uint8_opset11", "nhwc")])  # fmt: skip
def test_preprocess_folding_when_frames_have_several_sizes_places_each_like_the_preprocessor(
    models: dict[str, Path], astronaut_bgr: np.ndarray, resize_mode: str, model: str, layout: str, integer_resize: bool
) -> None:
    # given one folded uint8 RGB model of 128x96 that returns what its graph made of the frame
    # (NHWC, NCHW, and an opset 11 model the pass first upgrades to opset 13)
    spec = PreprocessSpec(color="rgb", layout=layout, resize=(128, 96), resize_mode=resize_mode, pad_value=7)
    path = models[model]
    folded = PreprocessFolding(spec, "pixels", integer_resize).apply(onnx.load(str(path)))
    preprocess = Preprocessor(spec, ModelFile.load(path).inputs[0])
    cv2 = import_cv2()

    for width, height in SIZES:
        frame = cv2.resize(astronaut_bgr, (width, height), interpolation=cv2.INTER_AREA)

        # when
        want = preprocess(frame).astype(np.int16)
        (got,) = run(folded, {FRAME_INPUT: frame[np.newaxis]})
        if layout == "nchw":
            want, got = want.transpose(0, 2, 3, 1), got.transpose(0, 2, 3, 1)

        # then
        assert got.shape == want.shape, f"{width}x{height}: the model's size"
        assert np.abs(got.astype(np.int16) - want).max() <= 1, f"{width}x{height}: every pixel within 1 level"
        geometry = preprocess.geometry(width, height)
        x, y = int(geometry.pad_x), int(geometry.pad_y)
        padding = np.ones(got.shape[1:3], dtype=bool)
        padding[y : y + round(height * geometry.scale_y), x : x + round(width * geometry.scale_x)] = False
        assert (got[0][padding] == 7).all(), f"{width}x{height}: padding exactly where the geometry puts it"


@RESIZE_FORMS
def test_preprocess_folding_when_float_nhwc_model_scales_and_letterboxes(
    models: dict[str, Path], astronaut_bgr: np.ndarray, integer_resize: bool
) -> None:
    # given a float32 NHWC model (channel-last mean/std) fed a portrait frame
    spec = PreprocessSpec(
        dtype="float32", layout="nhwc", color="rgb", resize=(128, 96), resize_mode="letterbox",
        scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4),
    )  # fmt: skip
    frame = np.ascontiguousarray(astronaut_bgr[:400, :250])

    # when
    (want,), (got,) = reference_and_folded(models["echo_float_nhwc"], spec, frame, integer_resize)

    # then one grey level through the normalisation is at most 1/255/0.2
    assert np.abs(got - want).max() <= 1 / 255 / 0.2 + 1e-5, "pixels within one level"


@pytest.mark.parametrize("resize_mode", ["stretch", "letterbox"])
def test_preprocess_folding_when_not_for_a_cpu_provider_resizes_only_float_nchw_tensors(
    demo_model: Path, resize_mode: str
) -> None:
    # given the detector's fold for a GPU profile (ONNX Runtime's CUDA Resize maps only the last two
    # axes, and truncates uint8 interpolation weights to 0)
    spec = PreprocessSpec(color="rgb", resize=(300, 300), resize_mode=resize_mode)
    folded = PreprocessFolding(spec, "image_tensor:0", integer_resize=False).apply(onnx.load(str(demo_model)))
    # when its shapes and types are inferred
    inferred = onnx.shape_inference.infer_shapes(folded)
    values = {v.name: v.type.tensor_type for v in [*inferred.graph.value_info, *inferred.graph.input]}
    resizes = [node for node in inferred.graph.node if node.op_type == "Resize" and node.name.startswith("edge_sdk")]
    # then every Resize the fold added takes float NCHW: [N, 3, H, W]
    assert resizes, "the fold resizes"
    for node in resizes:
        tensor = values[node.input[0]]
        assert tensor.elem_type == TensorProto.FLOAT, (
            f"{node.name} resizes {TensorProto.DataType.Name(tensor.elem_type)}"
        )
        assert tensor.shape.dim[1].dim_value == 3, f"{node.name}: channels on axis 1, the axes Resize leaves alone"


# --- bad input ------------------------------------------------------------------------------------------


def test_preprocess_folding_when_spec_does_not_fit_the_model_names_both(demo_model: Path) -> None:
    # given float NCHW preprocessing for the uint8 NHWC detector
    spec = PreprocessSpec(**NORMALISED, resize=(300, 300))

    # when
    with pytest.raises(ModelError) as caught:
        PreprocessFolding(spec, "image_tensor:0").apply(onnx.load(str(demo_model)))

    # then
    message = str(caught.value)
    assert "image_tensor:0: uint8" in message and "float32 NCHW" in message, f"names model and pipeline: {message}"


def test_preprocess_folding_when_input_is_missing_lists_the_model_inputs(models: dict[str, Path]) -> None:
    # given an input name the model does not have
    with pytest.raises(ModelError) as caught:
        # when
        PreprocessFolding(PreprocessSpec(), "images").apply(onnx.load(str(models["uint8_mean_classifier"])))

    # then
    assert "'images'" in str(caught.value) and "'frames'" in str(caught.value), "names wanted and available inputs"


def test_preprocess_folding_when_model_already_takes_raw_frames_says_to_turn_folding_off(
    models: dict[str, Path],
) -> None:
    # given a model folded once
    folded = PreprocessFolding(PreprocessSpec(), "frames").apply(onnx.load(str(models["uint8_mean_classifier"])))

    # when folded again
    with pytest.raises(ModelError) as caught:
        PreprocessFolding(PreprocessSpec(color="bgr"), FRAME_INPUT).apply(folded)

    # then
    assert "preprocess.fold: false" in str(caught.value), "the error says how to avoid it"
