"""fp16 on the CUDA provider: the builder converts the graph to float16 (CUDA has no fp16 option of its own)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.backends.onnxruntime import providers as provider_probe
from edge_sdk.backends.onnxruntime.builder import FP16_MODEL, OPTIMIZED_MODEL, OnnxRuntimeBuilder
from edge_sdk.backends.onnxruntime.fp16 import TOOL, convert_to_fp16
from edge_sdk.backends.onnxruntime.options import OnnxRuntimeOptions
from edge_sdk.core.model_file import ModelFile
from edge_sdk.profiles import ProfileCatalog
from tools.harness import onnx_models

PRE = "edge_sdk.preprocess/"


def folded_conv_model(path: Path) -> Path:
    """uint8 NHWC frames -> folded-preprocessing-like Cast/Transpose/Resize/Div -> Conv -> Relu -> pool -> scores."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "conv_b"),
        numpy_helper.from_array(np.array(255.0, np.float32), "scale"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "resize_scales"),
    ]
    nodes = [
        helper.make_node("Cast", ["frames"], ["as_float"], to=TensorProto.FLOAT, name=PRE + "cast"),
        helper.make_node("Transpose", ["as_float"], ["nchw"], perm=[0, 3, 1, 2], name=PRE + "layout"),
        helper.make_node("Resize", ["nchw", "", "resize_scales"], ["resized"], mode="linear", name=PRE + "resize"),
        helper.make_node("Div", ["resized", "scale"], ["images"], name=PRE + "scale"),
        helper.make_node("Conv", ["images", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["scores"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "folded_conv",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, [1, 8, 8, 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4])],
        inits,
    )
    model = onnx_models.make_model(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def loop_model(path: Path) -> Path:
    """x float32 [4] -> Mul -> a Loop whose body reads the Mul's output from the outer scope (as TF's NMS does)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "doubled"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [4]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"], name="mul"),
            helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body, name="loop"),
        ],
        "loop_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
        ],
    )
    model = onnx_models.make_model(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def types(model: onnx.ModelProto) -> dict[str, int]:
    found = {i.name: i.data_type for i in model.graph.initializer}
    for info in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        found[info.name] = info.type.tensor_type.elem_type
    return found


def options(*providers: dict[str, object]) -> OnnxRuntimeOptions:
    return OnnxRuntimeOptions(backend="onnxruntime", execution_providers=list(providers))


def test_convert_to_fp16_halves_conv_weights_and_keeps_io_preprocessing_and_ir(tmp_path: Path) -> None:
    # Given a conv model with folded preprocessing, at IR 8
    source = onnx.load(str(folded_conv_model(tmp_path / "m.onnx")))

    # When it is converted
    half, facts = convert_to_fp16(source)

    # Then the Conv computes in float16
    found = types(half)
    assert found["conv_w"] == TensorProto.FLOAT16, "the Conv weights must be float16"
    assert found["conv"] == TensorProto.FLOAT16, "the Conv output must be float16"
    # And inputs and outputs keep their types
    assert [i.type.tensor_type.elem_type for i in half.graph.input] == [TensorProto.UINT8]
    assert [o.type.tensor_type.elem_type for o in half.graph.output] == [TensorProto.FLOAT]
    # And the folded preprocessing stays float32 (exact resize and normalisation)
    nodes = {n.name: n for n in half.graph.node}
    div = nodes[PRE + "scale"]
    assert found[div.input[0]] == found["scale"] == TensorProto.FLOAT, "the Div must read float32"
    assert div.input[0] == nodes[PRE + "resize"].output[0], "no fp16 round trip between preprocessing nodes"
    assert half.ir_version == source.ir_version == onnx_models.IR_VERSION, "the input's IR version must be kept"
    assert facts == {
        "tool": TOOL,
        "converted_nodes": 4,
        "blocked": {},
        "blocked_preprocess_nodes": 4,
        "keep_io_types": True,
    }
    # And ONNX Runtime's CPU provider runs it close to the fp32 model
    frames = np.random.default_rng(0).integers(0, 256, (1, 8, 8, 3), dtype=np.uint8)
    want = onnxruntime.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    got = onnxruntime.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got.run(None, {"frames": frames})[0], want.run(None, {"frames": frames})[0], atol=2e-2)


def test_convert_to_fp16_keeps_a_loop_float32_and_feeds_its_outer_reads_float32(tmp_path: Path) -> None:
    # Given a model whose Loop body reads a tensor of the main graph
    source = onnx.load(str(loop_model(tmp_path / "loop.onnx")))

    # When it is converted
    half, facts = convert_to_fp16(source)

    # Then the Loop is blocked, and the graph loads and runs on the CPU provider
    assert facts["blocked"] == {"Loop": 1}
    assert types(half)["doubled"] == TensorProto.FLOAT16, "the Mul before the Loop must be converted"
    session = onnxruntime.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x + 3 * 2 * x)


def test_convert_to_fp16_keeps_an_input_passed_straight_to_an_output(tmp_path: Path) -> None:
    # given a split's tail: one cut tensor is computed on, another goes straight through
    graph = helper.make_graph(
        [helper.make_node("Relu", ["features"], ["scores"])],
        "tail",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("features", "boxes")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("boxes", "scores")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # when converted
    half, _facts = convert_to_fp16(model)
    # then it loads (the tool alone defined "boxes" twice), keeps its outputs in order and computes the same
    assert [o.name for o in half.graph.output] == ["boxes", "scores"]
    session = onnxruntime.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"features": np.array([[-1, 2, -3, 4]], np.float32), "boxes": np.arange(4, dtype=np.float32)[None]}
    boxes, scores = session.run(None, feed)
    assert np.array_equal(boxes, feed["boxes"]) and np.array_equal(scores, [[0, 2, 0, 4]])


def test_convert_to_fp16_runs_the_shipped_detector_on_the_cpu(demo_model: Path) -> None:
    # Given the shipped detector (TF post-processing with NMS Loops)
    source = onnx.load(str(demo_model))

    # When it is converted
    half, facts = convert_to_fp16(source)

    # Then its Loops stay float32 and the CPU provider runs it close to the fp32 model
    assert facts["blocked"].get("Loop") == 2 and facts["converted_nodes"] > 100
    frame = np.random.default_rng(1).integers(0, 256, (1, 300, 300, 3), dtype=np.uint8)
    feed = {"image_tensor:0": frame}
    want = onnxruntime.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"]).run(None, feed)
    got = onnxruntime.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    assert [g.dtype for g in got] == [w.dtype for w in want], "output types must be kept"
    np.testing.assert_allclose(got[2][0, :5], want[2][0, :5], atol=2e-2)


@pytest.fixture
def no_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Providers listed but not loadable stay in the list (so the first provider is what the options say)."""
    monkeypatch.setattr(provider_probe, "skip_unloadable", lambda name: False)


def build(model: Path, opts: OnnxRuntimeOptions, precision: str, out_dir: Path) -> dict[str, object]:
    out_dir.mkdir()
    return OnnxRuntimeBuilder().build(ModelFile.load(model), opts, precision, out_dir, None)  # type: ignore[arg-type]


def test_fp16_build_with_cuda_first_converts_the_graph_and_records_it(tmp_path: Path, no_skipping: None) -> None:
    # Given a conv model and CUDA first (onnxruntime without CUDA here falls back to the CPU)
    model = onnx_models.float_classifier(tmp_path / "conv.onnx")

    # When an fp16 engine is built
    facts = build(model, options({"type": "cuda"}, {"type": "cpu"}), "fp16", tmp_path / "entry")

    # Then the build converts the graph: Conv weights float16, IO float32, recorded in the facts
    half = onnx.load(str(tmp_path / "entry" / FP16_MODEL))
    assert types(half)["conv_w"] == TensorProto.FLOAT16
    assert [i.type.tensor_type.elem_type for i in half.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in half.graph.output] == [TensorProto.FLOAT]
    fp16 = facts["fp16"]
    assert isinstance(fp16, dict) and fp16["tool"] == TOOL and fp16["converted_nodes"] > 0
    assert (tmp_path / "entry" / OPTIMIZED_MODEL).exists()


@pytest.mark.parametrize("profile_name", ["x86-nvidia", "jetson-orin-gpu"])
def test_fp16_build_with_tensorrt_first_leaves_fp16_to_tensorrt(
    tmp_path: Path, no_skipping: None, catalog: ProfileCatalog, profile_name: str
) -> None:
    # Given a profile whose first provider is TensorRT (trt_fp16_enable does fp16); where onnxruntime has no
    # TensorRT the session falls back to the CPU, where TensorRT is listed without its libraries it refuses
    trt = "TensorrtExecutionProvider"
    if trt in onnxruntime.get_available_providers() and (problem := provider_probe.provider_load_problem(trt)):
        pytest.skip(f"{trt} is listed but cannot load here ({problem}): a build with it first is refused")
    opts = catalog.load(profile_name).engine
    model = onnx_models.float_classifier(tmp_path / "conv.onnx")

    # When an fp16 engine is built, then the graph is not converted
    facts = build(model, opts, "fp16", tmp_path / "entry")  # type: ignore[arg-type]
    assert "fp16" not in facts and not (tmp_path / "entry" / FP16_MODEL).exists()


@pytest.mark.parametrize(("providers", "precision"), [(({"type": "cpu"},), "fp32"), (({"type": "cuda"},), "fp32")])
def test_fp32_builds_are_unchanged(
    tmp_path: Path, no_skipping: None, providers: tuple[dict[str, object], ...], precision: str
) -> None:
    model = onnx_models.float_classifier(tmp_path / "conv.onnx")
    facts = build(model, options(*providers), precision, tmp_path / "entry")
    assert "fp16" not in facts and not (tmp_path / "entry" / FP16_MODEL).exists()
    optimized = onnx.load(str(tmp_path / "entry" / OPTIMIZED_MODEL))
    assert TensorProto.FLOAT16 not in types(optimized).values()


def test_builder_version_carries_the_build_format() -> None:
    assert OnnxRuntimeBuilder().version() == f"{onnxruntime.__version__}+sdk2", "cached engines must rebuild"
