"""The parts around a TensorRT engine that need no TensorRT: the header checked before deserialising,
calibration batches, the build's progress and elapsed time, the timing cache's files, parser errors per
node, and the tensor arithmetic of the runner."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edge_sdk.backends.tensorrt.build_plan import make_build_plan
from edge_sdk.backends.tensorrt.build_progress import LOG_EVERY_S, BuildClock
from edge_sdk.backends.tensorrt.calibration_batches import CalibrationBatches
from edge_sdk.backends.tensorrt.capabilities import describe_facts
from edge_sdk.backends.tensorrt.engine_file import EngineHeader, EngineTarget, target_mismatch
from edge_sdk.backends.tensorrt.engine_io import TensorSpec, check_input_shape, numpy_dtype
from edge_sdk.backends.tensorrt.onnx_parsing import ParserProblem, problems_paragraph, read_parser_problems
from edge_sdk.backends.tensorrt.options import TensorRTOptions
from edge_sdk.backends.tensorrt.placement import LayerPlacement, PlacementReport
from edge_sdk.backends.tensorrt.timing_cache import read_bytes, timing_cache_path, write_atomically
from edge_sdk.backends.tensorrt.versions import TensorRTVersion
from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.progress import ProgressUpdate, reporting_to
from edge_sdk.core.tensor_meta import TensorMeta

ORIN = EngineTarget("10.3.0.30", "Orin", "8.7", 0, "NVIDIA Jetson AGX Orin Developer Kit")


def header() -> EngineHeader:
    inputs = (TensorMeta("images", np.dtype(np.uint8), (1, 300, 300, 3)),)
    outputs = (TensorMeta("detections", np.dtype(np.float32), (1, 100, 6)),)
    return EngineHeader(ORIN, "fp16", {"builder_flags": ["FP16", "GPU_FALLBACK"]}, inputs, outputs)


def test_the_header_round_trips_and_describes_the_engine_without_tensorrt(tmp_path: Path) -> None:
    header().write(tmp_path)
    again = EngineHeader.read(tmp_path)
    assert again == header()
    assert ORIN.describe() == "TensorRT 10.3.0.30, DLA core 0 of Orin sm_87 (NVIDIA Jetson AGX Orin Developer Kit)"


def test_a_corrupt_or_foreign_header_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "engine.json").write_text("{not json")
    with pytest.raises(ModelError, match="not a TensorRT engine header the SDK wrote"):
        EngineHeader.read(tmp_path)
    (tmp_path / "engine.json").write_text('{"format": 99}')
    with pytest.raises(ModelError, match="format 99, expected 1"):
        EngineHeader.read(tmp_path)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"tensorrt_version": "10.3.0.31"}, "TensorRT '10.3.0.30' -> '10.3.0.31'"),
        ({"compute_capability": "8.9", "gpu": "L4"}, "compute capability '8.7' -> '8.9', GPU 'Orin' -> 'L4'"),
        ({"dla_core": 1}, "DLA core 0 -> 1"),
        ({"jetson_model": "NVIDIA Jetson Orin NX"}, "Jetson model"),
    ],
)
def test_a_plan_for_another_tensorrt_or_device_is_named_before_loading(change: dict[str, object], words: str) -> None:
    here = EngineTarget(**{**ORIN.__dict__, **change})
    problem = target_mismatch(ORIN, here)
    assert (
        problem is not None and problem.startswith("the engine was built for TensorRT 10.3.0.30") and words in problem
    )
    assert target_mismatch(ORIN, ORIN) is None


def samples(count: int) -> list[dict[str, np.ndarray]]:
    return [{"images": np.full((1, 3, 4, 4), i, np.float32)} for i in range(count)]


def test_calibration_batches_are_contiguous_and_full() -> None:
    batches = CalibrationBatches(samples(10), 4)
    assert len(batches) == 2 and batches.left_out == 2 and batches.nbytes() == {"images": 4 * 3 * 16 * 4}
    first, second = list(batches)
    assert first["images"].shape == (4, 3, 4, 4) and first["images"].flags.c_contiguous
    assert [int(v) for v in second["images"][:, 0, 0, 0]] == [4, 5, 6, 7]
    with pytest.raises(ConfigError, match="3 calibration samples cannot fill one batch of 4"):
        CalibrationBatches(samples(3), 4)


def test_the_build_reports_phases_with_elapsed_time_and_logs_every_half_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    clock = BuildClock(clock=lambda: now[0])
    seen: list[ProgressUpdate] = []
    with reporting_to(seen.append), caplog.at_level(logging.INFO, "edge_sdk.tensorrt"):
        clock.phase_start("Building engine", 3)
        for step in range(3):
            now[0] += LOG_EVERY_S / 2 + 1
            clock.step("Building engine", step)
        clock.phase_finish("Building engine")
    assert [(u.done, u.total) for u in seen] == [(0, 3), (1, 3), (2, 3), (3, 3), (3, 3)]
    assert seen[-1].finished and seen[2].detail == "Building engine, 32 s"
    assert [r.getMessage() for r in caplog.records] == ["TensorRT build: Building engine 2/3, 0m32s elapsed"]


def test_the_timing_cache_is_one_file_per_tensorrt_and_device(tmp_path: Path) -> None:
    gpu = timing_cache_path(tmp_path, "10.3.0.30", "Orin (nvgpu)", "8.7", None)
    dla = timing_cache_path(tmp_path, "10.3.0.30", "Orin (nvgpu)", "8.7", 0)
    assert gpu.name == "trt10.3.0.30_Orin_nvgpu_sm8.7.cache" and dla != gpu and "dla0" in dla.name
    assert read_bytes(gpu) == b""
    write_atomically(gpu, b"timings")
    assert read_bytes(gpu) == b"timings" and [p.name for p in tmp_path.iterdir()] == [gpu.name]


class _ParserError:
    """The documented accessors of TensorRT's ParserError (code, desc, node, node_name, node_operator)."""

    def __init__(self, node: int, name: str, operator: str, desc: str):
        self._node, self._name, self._operator, self._desc = node, name, operator, desc

    def code(self) -> SimpleNamespace:
        return SimpleNamespace(name="UNSUPPORTED_NODE")

    def desc(self) -> str:
        return self._desc

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._name

    def node_operator(self) -> str:
        return self._operator


def test_parser_errors_name_each_failing_node() -> None:
    errors = [_ParserError(7, "nms", "NonMaxSuppression", "no importer"), _ParserError(-1, "", "", "bad file")]
    parser = SimpleNamespace(num_errors=2, get_error=lambda i: errors[i])
    problems = read_parser_problems(parser, TensorRTVersion(10, 3), [])
    assert problems[0].line() == "node 7 'nms' (NonMaxSuppression): no importer (UNSUPPORTED_NODE)"
    assert problems[1].line() == "bad file (UNSUPPORTED_NODE)"
    # before TensorRT 10 the parser gives the node's index only: its name comes from the model
    old = read_parser_problems(parser, TensorRTVersion(8, 6), [("n", "Op")] * 7 + [("nms", "NonMaxSuppression")])
    assert old[0] == problems[0]
    paragraph = problems_paragraph("model.onnx", [ParserProblem(1, "a", "Op", "x", "C")] * 25)
    assert paragraph.splitlines()[0] == "TensorRT's ONNX parser refused model.onnx (25 errors):"
    assert paragraph.splitlines()[-1] == "  ... and 5 more"


def test_tensor_types_and_shapes_are_checked_before_any_cuda_call() -> None:
    assert numpy_dtype("HALF", "x") == np.float16
    with pytest.raises(ModelError, match="'x' is BF16, which numpy cannot hold"):
        numpy_dtype("BF16", "x")
    spec = TensorSpec("images", True, np.dtype(np.float32), (-1, 3, 8, 8), (4, 3, 8, 8))
    assert spec.max_nbytes == 4 * 3 * 64 * 4 and not spec.static
    check_input_shape(spec, (2, 3, 8, 8))
    with pytest.raises(ModelError, match=r"axis 0 takes 1..4 \(the engine's optimisation profile\), got 5"):
        check_input_shape(spec, (5, 3, 8, 8))
    with pytest.raises(ModelError, match="expected size 3 on axis 1"):
        check_input_shape(spec, (1, 4, 8, 8))


def test_build_and_cache_inspect_describe_a_dla_builds_facts() -> None:
    inputs = (TensorMeta("images", np.dtype(np.float32), ("n", 3, 8, 8)),)
    options = TensorRTOptions(backend="tensorrt", dla_core=0, max_batch=4)
    plan = make_build_plan(options, "fp16", TensorRTVersion(10, 3), inputs)
    placement = PlacementReport(
        0, [LayerPlacement("conv", "CONVOLUTION", "DLA"), LayerPlacement("nms", "NMS", "GPU", "no DLA kernel")]
    )
    facts = {
        "target": ORIN.describe(),
        "build_plan": plan.to_dict(),
        "build_seconds": 83.4,
        "dla_placement": placement.to_dict(),
    }
    lines = describe_facts(facts)
    assert lines[0] == f"target: {ORIN.describe()}"
    assert lines[1] == (
        "build: fp16 on DLA core 0; builder flags FP16, GPU_FALLBACK; network flags none; optimisation level 3; "
        "workspace 1024 MiB"
    )
    assert lines[2] == "shapes images: min 1x3x8x8, opt 1x3x8x8, max 4x3x8x8"
    assert "built in 83.4 s; timing cache off" in lines
    assert lines[-2:] == [
        "DLA placement: 1 of 2 layers on DLA core 0 (50%), 1 on the GPU",
        "DLA placement: GPU  nms (NMS): no DLA kernel",
    ]
