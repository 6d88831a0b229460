"""Profiles that need accelerators, run for real where the hardware is; skipped here with the reason.

On a Jetson, an NVIDIA server or an Atlas box these build the shipped detector with the detected
profile and check that the accelerator's provider took the graph and the person is still found.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog


def _detect_person_with_detected_profile(
    catalog: ProfileCatalog, demo_model: Path, astronaut_bgr: np.ndarray, cache: EngineCache, provider_type: str
) -> tuple[list[str], float]:
    profile = catalog.detect()
    if provider_type not in [p.type for p in profile.engine.execution_providers]:
        pytest.skip(f"detected profile {profile.name} does not use the {provider_type} provider")
    prepared = prepare_engine(demo_model, profile, cache=cache)
    frame = np.ascontiguousarray(astronaut_bgr[:, :, ::-1][np.newaxis])
    with prepared.open() as runner:
        outputs = runner.infer({"image_tensor:0": frame})
    return list(prepared.entry.manifest["facts"]["providers_used"]), float(outputs["detection_scores:0"][0, 0])


@pytest.mark.tensorrt
def test_prepare_engine_when_tensorrt_is_present_runs_the_detector_on_it(
    catalog: ProfileCatalog, demo_model: Path, astronaut_bgr: np.ndarray, engine_cache: EngineCache
) -> None:
    providers, score = _detect_person_with_detected_profile(
        catalog, demo_model, astronaut_bgr, engine_cache, "tensorrt"
    )
    assert providers[0] == "TensorrtExecutionProvider", f"TensorRT should take the graph first, got {providers}"
    assert score > 0.85, "fp16 on TensorRT (GPU or DLA) must still find the astronaut"


@pytest.mark.gpu
def test_prepare_engine_when_cuda_is_present_runs_the_detector_on_it(
    catalog: ProfileCatalog, demo_model: Path, astronaut_bgr: np.ndarray, engine_cache: EngineCache
) -> None:
    providers, score = _detect_person_with_detected_profile(catalog, demo_model, astronaut_bgr, engine_cache, "cuda")
    assert "CUDAExecutionProvider" in providers, f"CUDA should be among the providers used, got {providers}"
    assert score > 0.85


@pytest.mark.atlas
def test_prepare_engine_when_cann_is_present_runs_the_detector_on_the_npu(
    catalog: ProfileCatalog, demo_model: Path, astronaut_bgr: np.ndarray, engine_cache: EngineCache
) -> None:
    providers, score = _detect_person_with_detected_profile(catalog, demo_model, astronaut_bgr, engine_cache, "cann")
    assert providers[0] == "CANNExecutionProvider", f"CANN should take the graph first, got {providers}"
    assert score > 0.85
