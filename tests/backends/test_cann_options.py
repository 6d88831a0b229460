"""The atlas-npu profile's route: the profile's CANN options become ONNX Runtime's CANN provider options
(device id, precision mode, operator implementation mode, memory limit). The provider itself needs an
Ascend NPU and the CANN toolkit (the `atlas` tests of tests/engines skip without them)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edge_sdk.backends.onnxruntime.options import CannProvider
from edge_sdk.profiles import ProfileCatalog


def test_the_profiles_precision_picks_cann_precision_mode_unless_the_profile_names_one() -> None:
    provider = CannProvider(type="cann", device_id=1)
    assert provider.ort_options("fp16", "/cache") == {
        "device_id": "1",
        "precision_mode": "force_fp16",
        "enable_cann_graph": "1",
    }
    assert provider.ort_options("fp32", "/cache")["precision_mode"] == "force_fp32"
    mixed = CannProvider(type="cann", precision_mode="allow_mix_precision")
    assert mixed.ort_options("fp16", "/cache")["precision_mode"] == "allow_mix_precision"


def test_implementation_mode_and_memory_limit_reach_the_provider() -> None:
    provider = CannProvider(type="cann", op_select_impl_mode="high_performance", memory_limit_mb=2048, cann_graph=False)
    options = provider.ort_options("fp16", "/cache")
    assert options["op_select_impl_mode"] == "high_performance"
    assert options["npu_mem_limit"] == str(2048 * 1024 * 1024) and options["enable_cann_graph"] == "0"


def test_an_unknown_mode_is_refused_when_the_profile_loads() -> None:
    with pytest.raises(ValidationError, match="high_precision"):
        CannProvider(type="cann", op_select_impl_mode="fastest")  # type: ignore[arg-type]


def test_the_shipped_atlas_profile_sets_them() -> None:
    provider = ProfileCatalog().load("atlas-npu").engine.execution_providers[0]  # type: ignore[attr-defined]
    assert isinstance(provider, CannProvider) and provider.op_select_impl_mode == "high_performance"
