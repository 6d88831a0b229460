"""Providers onnxruntime lists but cannot load, found before a session: real dlopen errors from a fake capi folder."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.backends.onnxruntime import providers
from edge_sdk.backends.onnxruntime.providers import (
    describe_load_error,
    loadable_providers,
    provider_load_problem,
)
from edge_sdk.backends.onnxruntime.session import check_providers, provider_list
from edge_sdk.core.errors import BackendUnavailableError
from edge_sdk.profiles import ProfileCatalog

from .fake_capi import MISSING_DEPENDENCY, build_fake_capi, compile_library

TRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@pytest.fixture(autouse=True)
def _fresh_probe() -> Iterator[None]:
    """Each test probes and warns afresh; no result leaks into other tests."""
    providers.clear_cache()
    yield
    providers.clear_cache()


def _host_lists(monkeypatch: pytest.MonkeyPatch, capi: Path, listed: list[str]) -> None:
    """onnxruntime here lists `listed` and loads providers from `capi`, like onnxruntime-gpu from pip."""
    monkeypatch.setattr(providers, "capi_folder", lambda: capi)
    monkeypatch.setattr(providers, "available_providers", lambda: list(listed))
    monkeypatch.setattr(providers, "tensorrt_libs_folder", lambda: None)


def test_provider_load_problem_when_a_dependency_is_missing_names_the_library_in_one_line(tmp_path: Path) -> None:
    # Given a capi folder whose TensorRT provider links against a library that is gone
    capi = build_fake_capi(tmp_path / "capi", unloadable=[TRT])

    # When the provider is probed
    problem = provider_load_problem(TRT, capi=capi)

    # Then one line names the missing library and how to get TensorRT
    assert problem is not None, "a provider whose dependency is missing must not count as loadable"
    assert problem.startswith(f"{MISSING_DEPENDENCY} is missing"), f"the line must name the library: {problem}"
    assert "TensorRT" in problem, f"the line must say how to install TensorRT: {problem}"
    assert "\n" not in problem, "the problem is one line"


def test_provider_load_problem_when_the_library_loads_returns_none(tmp_path: Path) -> None:
    capi = build_fake_capi(tmp_path / "capi", loadable=[CUDA])
    assert provider_load_problem(CUDA, capi=capi) is None, "a provider whose library loads is usable"


def test_provider_load_problem_when_provider_is_built_in_or_has_no_library_returns_none(tmp_path: Path) -> None:
    capi = build_fake_capi(tmp_path / "capi")
    assert provider_load_problem(CPU, capi=capi) is None, "CPU is built into the core library: nothing to probe"
    assert provider_load_problem(TRT, capi=capi) is None, "without its library file ONNX Runtime decides, not the probe"


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("libnvinfer.so.10", "pip install 'tensorrt-cu12-libs==10.*'"),
        ("libcudnn.so.9", "pip install 'nvidia-cudnn-cu12==9.*'"),
        ("libcublasLt.so.12", "pip install 'onnxruntime-gpu[cuda,cudnn]'"),
        ("libcuda.so.1", "NVIDIA driver"),
    ],
)
def test_describe_load_error_when_an_nvidia_library_is_missing_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: str, expected: str
) -> None:
    # Given onnxruntime built for CUDA 12 and the dlopen error a missing library gives
    monkeypatch.setattr(providers, "_cuda_major", lambda: "12")
    error = f"{missing}: cannot open shared object file: No such file or directory"

    # When it is described
    line = describe_load_error(TRT, error)

    # Then the line names the library and the install command
    assert line.startswith(f"{missing} is missing; "), line
    assert expected in line, f"expected the hint {expected!r}, got {line!r}"


def test_provider_list_when_tensorrt_is_listed_but_cannot_load_drops_it_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, catalog: ProfileCatalog
) -> None:
    # Given onnxruntime-gpu that lists TensorRT, whose libraries are absent, and a loadable CUDA
    _host_lists(monkeypatch, build_fake_capi(tmp_path / "capi", loadable=[CUDA], unloadable=[TRT]), [TRT, CUDA, CPU])
    options = catalog.load("x86-nvidia").engine

    # When the session provider list is made twice (build, then run)
    with caplog.at_level(logging.WARNING, logger=providers.__name__):
        first = provider_list(options, "fp32", tmp_path / "entry")
        second = provider_list(options, "fp32", tmp_path / "entry")

    # Then TensorRT is left out both times, with one warning line that names the missing library
    assert [name for name, _ in first] == [CUDA, CPU], "TensorRT must not reach ONNX Runtime, which would dump"
    assert [name for name, _ in second] == [CUDA, CPU]
    warnings = [r.getMessage() for r in caplog.records if TRT in r.getMessage()]
    assert len(warnings) == 1, f"one warning per process, got {warnings}"
    assert MISSING_DEPENDENCY in warnings[0] and "\n" not in warnings[0], warnings[0]
    assert loadable_providers() == [CUDA, CPU], "loadable providers leave out the one that cannot load"


def test_check_providers_when_tensorrt_cannot_load_but_cuda_can_lets_the_gpu_profile_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: ProfileCatalog
) -> None:
    # Given TensorRT listed but unloadable, CUDA loadable
    _host_lists(monkeypatch, build_fake_capi(tmp_path / "capi", loadable=[CUDA], unloadable=[TRT]), [TRT, CUDA, CPU])

    # When the x86 GPU profile is checked, then it passes: CUDA runs fp32 and fp16 without TensorRT
    for precision in ("fp32", "fp16"):
        check_providers(catalog.load("x86-nvidia").engine, precision)  # type: ignore[arg-type]


def test_check_providers_when_dla_tensorrt_cannot_load_refuses_naming_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: ProfileCatalog
) -> None:
    # Given TensorRT listed but unloadable
    _host_lists(monkeypatch, build_fake_capi(tmp_path / "capi", loadable=[CUDA], unloadable=[TRT]), [TRT, CUDA, CPU])

    # When the DLA profile, which only TensorRT can run, is checked
    with pytest.raises(BackendUnavailableError) as raised:
        check_providers(catalog.load("jetson-orin-dla").engine, "fp16")

    # Then it is refused like a missing provider, naming the library and why the profile needs it
    message = str(raised.value)
    assert "'tensorrt'" in message and "cannot load" in message, message
    assert MISSING_DEPENDENCY in message and "DLA" in message, message


def test_check_providers_when_no_accelerator_can_load_refuses_instead_of_running_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: ProfileCatalog
) -> None:
    # Given CUDA without its libraries (cuDNN, say) and TensorRT without its own
    _host_lists(monkeypatch, build_fake_capi(tmp_path / "capi", unloadable=[TRT, CUDA]), [TRT, CUDA, CPU])

    # When the GPU profile is checked
    with pytest.raises(BackendUnavailableError, match="CPU alone"):
        check_providers(catalog.load("x86-nvidia").engine, "fp32")


def test_provider_load_problem_when_tensorrt_comes_from_its_pip_wheel_loads_it_from_there(tmp_path: Path) -> None:
    # Given TensorRT's library in a folder off the loader's path (like the tensorrt_libs wheel) and a provider
    # linked against it; run in a child process, since a loaded library stays loaded by its soname
    trt_libs = tmp_path / "tensorrt_libs"
    trt_libs.mkdir()
    compile_library("int nvinfer(void) { return 0; }\n", trt_libs / "libnvinfer.so.10", "-Wl,-soname,libnvinfer.so.10")
    capi = build_fake_capi(tmp_path / "capi")
    source = "int nvinfer(void);\nint provider(void) { return nvinfer(); }\n"
    compile_library(source, capi / providers.PROVIDER_LIBRARIES[TRT], str(trt_libs / "libnvinfer.so.10"))
    script = (
        "from pathlib import Path; from edge_sdk.backends.onnxruntime import providers as p\n"
        f"p.tensorrt_libs_folder = lambda: None\nprint(p.provider_load_problem({TRT!r}, Path({str(capi)!r})))\n"
        f"p.clear_cache(); p.tensorrt_libs_folder = lambda: Path({str(trt_libs)!r})\n"
        f"print(p.provider_load_problem({TRT!r}, Path({str(capi)!r})))\n"
    )

    # When it is probed without, then with, the wheel's folder
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    without, with_wheel = done.stdout.splitlines()

    # Then it is missing without the folder and loads with it
    assert without.startswith("libnvinfer.so.10 is missing"), done.stdout
    assert with_wheel == "None", f"TensorRT's wheel must be found: {done.stdout}"


def test_describe_load_error_when_the_library_is_there_but_broken_quotes_the_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a TensorRT provider built for another TensorRT (a symbol the installed one lacks)
    monkeypatch.setattr(providers, "_cuda_major", lambda: "13")
    error = "/venv/onnxruntime/capi/libonnxruntime_providers_tensorrt.so: undefined symbol: createInferBuilder_INTERNAL"

    # When it is described
    line = describe_load_error(TRT, error)

    # Then the loader's words and how to get a matching TensorRT are on one line
    assert "undefined symbol: createInferBuilder_INTERNAL" in line, line
    assert "tensorrt-cu13-libs" in line, f"the hint follows onnxruntime's CUDA major: {line}"
