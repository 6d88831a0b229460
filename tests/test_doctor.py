"""diagnose(): profile usability follows the host first, then what the backend can load here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.backends.onnxruntime import providers
from edge_sdk.core.host import HostFacts
from edge_sdk.doctor import diagnose
from edge_sdk.profiles import ProfileCatalog

from .backends.fake_capi import MISSING_DEPENDENCY, build_fake_capi

GPU_SERVER = HostFacts(arch="x86_64", cpu_model="Test CPU", nvidia_gpus=("NVIDIA H200",))
ORIN = HostFacts(
    arch="aarch64",
    tegra_release="# R36 (release), REVISION: 3.0",
    device_tree_model="NVIDIA Jetson AGX Orin Developer Kit",
    device_tree_compatible=("nvidia,tegra234",),
    dla_cores=2,
)
TRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"


@pytest.fixture
def gpu_wheel_without_tensorrt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """onnxruntime-gpu from pip on a host without TensorRT's libraries: TensorRT listed, not loadable."""
    capi = build_fake_capi(tmp_path / "capi", loadable=[CUDA], unloadable=[TRT])
    monkeypatch.setattr(providers, "capi_folder", lambda: capi)
    monkeypatch.setattr(providers, "available_providers", lambda: [TRT, CUDA, CPU])
    monkeypatch.setattr(providers, "tensorrt_libs_folder", lambda: None)
    providers.clear_cache()
    yield
    providers.clear_cache()


@pytest.mark.usefixtures("gpu_wheel_without_tensorrt")
def test_diagnose_when_tensorrt_cannot_load_on_a_gpu_server_says_so_and_keeps_x86_nvidia_on_cuda(
    catalog: ProfileCatalog,
) -> None:
    # When doctor looks at an x86 GPU server whose onnxruntime lists TensorRT without its libraries
    report = diagnose(catalog, GPU_SERVER)
    profiles = {p.name: p for p in report.profiles}

    # Then the provider is shown as unloadable with the missing library
    assert report.backends["onnxruntime"][TRT].startswith(f"listed but cannot load: {MISSING_DEPENDENCY} is missing"), (
        report.backends
    )
    assert report.backends["onnxruntime"][CUDA] == "usable"
    # And x86-nvidia runs on CUDA, saying it skips TensorRT; the Jetson profiles are not usable on x86
    assert profiles["x86-nvidia"].usable, profiles["x86-nvidia"]
    assert TRT in (profiles["x86-nvidia"].note or ""), "doctor says which provider the profile skips here"
    for name in ("jetson-orin-dla", "jetson-orin-gpu", "arm-cpu"):
        assert not profiles[name].usable
        assert (profiles[name].problem or "").startswith("wrong architecture"), profiles[name]
    assert profiles["atlas-npu"].problem == "needs an Ascend NPU"


def test_diagnose_when_host_is_a_jetson_does_not_call_arm_cpu_excluded(catalog: ProfileCatalog) -> None:
    # When doctor looks at a Jetson, which arm-cpu's rule excludes from detection (tegra: false)
    status = {p.name: p for p in diagnose(catalog, ORIN).profiles}["arm-cpu"]

    # Then whatever keeps arm-cpu from running here, it is not the exclusion
    assert "Jetson" not in (status.problem or ""), f"tegra: false only steers detection, got {status.problem}"


X86_BOX = HostFacts(arch="x86_64", cpu_model="Test CPU")


def test_diagnose_when_onnxruntime_is_missing_on_x86_says_to_install_it_only_where_installing_helps(
    catalog: ProfileCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an x86 box without a GPU whose onnxruntime cannot be imported
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    providers.clear_cache()

    # When doctor looks at every profile
    profiles = {p.name: p for p in diagnose(catalog, X86_BOX).profiles}

    # Then x86-cpu, which this box could run, says what to install
    assert profiles["x86-cpu"].cause == "backend" and "pip install" in (profiles["x86-cpu"].problem or "")
    # And the profiles this box is not for give that reason, with no package to install
    for name in ("arm-cpu", "jetson-orin-dla", "jetson-orin-gpu", "x86-nvidia", "atlas-npu"):
        status = profiles[name]
        assert status.cause == "host", status
        assert "pip install" not in (status.problem or ""), f"{name}: no package makes this box fit: {status}"
    assert profiles["arm-cpu"].problem == "wrong architecture: profile is for aarch64, this host is x86_64"
    assert profiles["x86-nvidia"].problem == "needs an NVIDIA GPU (nvidia-smi lists none)"
