"""A provider that refuses the profile's options (a GPU the host does not have) is one line, never a
silent CPU session: ONNX Runtime's own fallback prints an 'EP Error' dump and retries on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.backends.onnxruntime.session import _ep_error_reason, open_session
from edge_sdk.core.errors import ConfigError, EngineBuildError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog

from ..conftest import REPO_ROOT

# What onnxruntime-gpu 1.31.1 printed on the H200 host (2026-12-01) for device_id 7 on a one-GPU host.
H200_DUMP = """*************** EP Error ***************
EP Error /onnxruntime_src/onnxruntime/core/providers/cuda/cuda_execution_provider_info.cc:63 static onnxruntime::CUDAExecutionProviderInfo onnxruntime::CUDAExecutionProviderInfo::FromProviderOptions(const onnxruntime::ProviderOptions&) [ONNXRuntimeError] : 1 : FAIL : provider_options_utils.h:187 Parse Failed to parse provider option "device_id": cuda_execution_provider_info.cc:71 operator() Invalid device ID: 7, must be between 0 (inclusive) and 1 (exclusive).
 when using [('CUDAExecutionProvider', {'device_id': '7'}), ('CPUExecutionProvider', {})]
Falling back to ['CPUExecutionProvider'] and retrying.
****************************************
"""


def test_the_reason_of_onnxruntimes_fallback_dump_is_kept_without_source_locations() -> None:
    reason = _ep_error_reason(H200_DUMP)
    assert reason == (
        'Parse Failed to parse provider option "device_id": Invalid device ID: 7, must be between 0 (inclusive) '
        "and 1 (exclusive)."
    )


def test_a_session_that_cannot_be_made_leaves_no_fallback_dump_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a corrupt model: ONNX Runtime tries, prints its fallback dump, retries and fails again
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not a model")
    # when a session is opened, then ONNX Runtime's own error comes back and its dump is not shown
    with pytest.raises(Exception) as failed:
        open_session(str(corrupt), None, [("CPUExecutionProvider", {})])
    assert "EP Error" not in capsys.readouterr().out
    assert "EP Error" not in str(failed.value)


@pytest.mark.gpu
def test_a_cuda_device_id_the_host_lacks_is_refused_in_one_line_and_the_cache_is_kept(
    demo_model: Path, engine_cache: EngineCache, capsys: pytest.CaptureFixture[str]
) -> None:
    # given x86-nvidia asking for GPU 7 on a host with fewer GPUs, and a cache with one engine
    catalog = ProfileCatalog(REPO_ROOT / "device_profiles")
    shipped = catalog.load("x86-nvidia")
    providers = [
        p.model_copy(update={"device_id": 7}) if hasattr(p, "device_id") else p
        for p in shipped.engine.execution_providers
    ]
    profile = shipped.model_copy(
        update={"engine": shipped.engine.model_copy(update={"execution_providers": providers})}
    )
    prepare_engine(demo_model, catalog.load("x86-cpu"), cache=engine_cache)
    before = [report.digest for report in engine_cache.entries()]
    # when an engine is built for it
    with pytest.raises((ConfigError, EngineBuildError)) as refused:
        prepare_engine(demo_model, profile, cache=engine_cache)
    # then one line names the provider and ONNX Runtime's reason; nothing ran on the CPU instead
    message = str(refused.value)
    assert "\n" not in message and "CUDAExecutionProvider" in message and "Invalid device ID: 7" in message
    assert "EP Error" not in capsys.readouterr().out
    assert [report.digest for report in engine_cache.entries()] == before
