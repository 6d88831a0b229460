"""The profile -> builder settings mapping per TensorRT generation (build_plan.py, versions.py): what the
builder will be asked for, checked without TensorRT."""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.backends.tensorrt.build_plan import ShapeRange, make_build_plan
from edge_sdk.backends.tensorrt.options import TensorRTOptions
from edge_sdk.backends.tensorrt.versions import TensorRTVersion, check_supported
from edge_sdk.core.errors import BackendUnavailableError, ConfigError
from edge_sdk.core.tensor_meta import TensorMeta

STATIC = (TensorMeta("images", np.dtype(np.float32), (1, 3, 224, 224)),)
DYNAMIC = (TensorMeta("images", np.dtype(np.float32), ("batch", 3, 224, 224)),)
V8_5, V8_6, V10_3, V10_13, V11_4 = (
    TensorRTVersion.parse(v) for v in ("8.5.2.2", "8.6.1", "10.3.0.30", "10.13.0.35", "11.4.1")
)


def options(**fields: object) -> TensorRTOptions:
    return TensorRTOptions.model_validate({"backend": "tensorrt", **fields})


def test_fp16_on_tensorrt_10_is_the_builder_flag() -> None:
    plan = make_build_plan(options(), "fp16", V10_3, STATIC)
    assert plan.builder_flags == ("FP16",) and plan.fp16_route == "builder_flag"
    assert plan.network_flags == () and not plan.strongly_typed and plan.progress_monitor
    assert plan.notes == ()


def test_fp16_on_tensorrt_11_converts_the_graph_in_a_strongly_typed_network() -> None:
    plan = make_build_plan(options(), "fp16", V11_4, STATIC)
    assert plan.builder_flags == () and plan.fp16_route == "fp16_graph"
    assert plan.network_flags == ("STRONGLY_TYPED",)


def test_int8_on_tensorrt_10_calibrates_and_says_calibrators_are_deprecated() -> None:
    plan = make_build_plan(options(), "int8", V10_3, STATIC)
    assert plan.builder_flags == ("FP16", "INT8") and plan.int8_route == "calibrator"
    assert any("deprecated since TensorRT 10.1" in note for note in plan.notes)
    later = make_build_plan(options(), "int8", V10_13, STATIC)
    assert any("deprecated since TensorRT 10.12" in note for note in later.notes)


def test_int8_on_tensorrt_11_builds_from_a_qdq_model_without_flags() -> None:
    plan = make_build_plan(options(), "int8", V11_4, STATIC)
    assert plan.builder_flags == () and plan.int8_route == "qdq_model" and plan.strongly_typed


def test_tensorrt_8_5_needs_explicit_batch_and_has_no_optimisation_level() -> None:
    plan = make_build_plan(options(optimization_level=5), "fp16", V8_5, STATIC)
    assert plan.network_flags == ("EXPLICIT_BATCH",) and plan.optimization_level is None
    assert "no builder optimisation level" in plan.notes[0] and not plan.progress_monitor
    assert make_build_plan(options(optimization_level=5), "fp16", V8_6, STATIC).optimization_level == 5


def test_dla_sets_the_core_the_default_device_and_gpu_fallback() -> None:
    plan = make_build_plan(options(dla_core=1, min_dla_share=0.6), "fp16", V10_3, STATIC)
    assert plan.default_device == "DLA" and plan.dla_core == 1 and "GPU_FALLBACK" in plan.builder_flags
    assert plan.min_dla_share == 0.6
    strict = make_build_plan(options(dla_core=0, gpu_fallback=False), "int8", V10_3, STATIC)
    assert "GPU_FALLBACK" not in strict.builder_flags
    with pytest.raises(ConfigError, match="the DLA runs fp16 and int8 only"):
        make_build_plan(options(dla_core=0), "fp32", V10_3, STATIC)


def test_a_dynamic_batch_gets_one_optimisation_profile_from_the_options() -> None:
    plan = make_build_plan(options(opt_batch=4, max_batch=16), "fp16", V10_3, DYNAMIC)
    assert plan.shape_ranges == (ShapeRange("images", (1, 3, 224, 224), (4, 3, 224, 224), (16, 3, 224, 224)),)
    assert make_build_plan(options(), "fp16", V10_3, STATIC).static_shapes


def test_a_dynamic_axis_other_than_the_batch_is_refused_with_the_input() -> None:
    inputs = (TensorMeta("images", np.dtype(np.float32), (1, 3, "h", "w")),)
    with pytest.raises(ConfigError, match=r"input 'images' .* dynamic axes \[2, 3\] besides the batch"):
        make_build_plan(options(), "fp16", V10_3, inputs)


def test_workspace_and_level_come_from_the_profile() -> None:
    plan = make_build_plan(options(workspace_mb=2048, optimization_level=4), "fp32", V10_3, STATIC)
    assert plan.workspace_bytes == 2048 << 20 and plan.optimization_level == 4 and plan.builder_flags == ()


def test_strongly_typed_choices_that_a_version_cannot_build_are_refused() -> None:
    with pytest.raises(ConfigError, match="strongly typed networks only"):
        make_build_plan(options(strongly_typed=False), "fp16", V11_4, STATIC)
    with pytest.raises(ConfigError, match=r"came in 9\.1"):
        make_build_plan(options(strongly_typed=True), "fp16", V8_6, STATIC)
    plan = make_build_plan(options(strongly_typed=True), "int8", V10_3, STATIC)
    assert plan.int8_route == "qdq_model" and plan.builder_flags == ()


def test_options_that_contradict_each_other_are_refused_when_the_profile_loads() -> None:
    with pytest.raises(ValueError, match="min_dla_share needs dla_core"):
        options(min_dla_share=0.5)
    with pytest.raises(ValueError, match="opt_batch 8 is larger than max_batch 4"):
        options(opt_batch=8, max_batch=4)


@pytest.mark.parametrize(
    ("version", "board", "problem"),
    [
        ("10.3.0", "NVIDIA Jetson AGX Orin Developer Kit", None),
        ("8.5.2", "NVIDIA Jetson Orin NX", None),
        ("10.7.0", "NVIDIA Jetson AGX Orin", None),
        ("10.8.0", "NVIDIA Jetson AGX Orin", "10.7 was the last 10.x with DLA"),
        ("11.3.0", "NVIDIA Jetson AGX Orin", "returns in 11.4.1"),
        ("11.4.1", "NVIDIA Jetson AGX Orin", None),
        ("11.4.1", "NVIDIA Jetson Orin NX", "AGX Orin only"),
        ("10.3.0", "NVIDIA Jetson AGX Thor", "Thor has no DLA"),
    ],
)
def test_dla_support_by_version_and_board(version: str, board: str, problem: str | None) -> None:
    found = TensorRTVersion.parse(version).dla_problem(board)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_versions_before_8_5_and_unreadable_ones_are_refused() -> None:
    with pytest.raises(BackendUnavailableError, match=r"older than 8\.5"):
        check_supported(TensorRTVersion.parse("8.4.3"))
    with pytest.raises(BackendUnavailableError, match="cannot read the TensorRT version"):
        TensorRTVersion.parse("unknown")
