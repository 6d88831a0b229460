"""Which form a folded resize takes for a profile: on the raw uint8 frame only where every provider is a CPU one."""

from __future__ import annotations

import pytest

from edge_sdk.engines.engine import exact_uint8_resize
from edge_sdk.profiles import ProfileCatalog


@pytest.mark.parametrize(
    ("profile", "integer"),
    [("x86-cpu", True), ("arm-cpu", True), ("x86-nvidia", False), ("jetson-orin-gpu", False),
     ("jetson-orin-dla", False), ("atlas-npu", False)],
)  # fmt: skip
def test_exact_uint8_resize_when_a_profile_names_a_gpu_or_npu_provider_is_false(
    catalog: ProfileCatalog, profile: str, integer: bool
) -> None:
    # CUDA's Resize maps only the last two axes and truncates uint8 weights; the others are unverified
    assert exact_uint8_resize(catalog.load(profile)) is integer
