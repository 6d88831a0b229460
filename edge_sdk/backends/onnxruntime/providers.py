"""Which listed execution providers can really load here, found before any session is made.

onnxruntime lists a provider when its build has it (`get_available_providers()`), even when the
libraries that provider links against are absent: onnxruntime-gpu from pip lists TensorRT on a host
without libnvinfer. A session then prints a long "EP Error" block and falls back. ONNX Runtime loads
the provider from its `capi/` folder, `libonnxruntime_providers_shared.so` first (RTLD_GLOBAL), then
`libonnxruntime_providers_<name>.so` (RTLD_LOCAL); this module does the same with ctypes, which
loads the libraries only (no CUDA context, no device touched), and says which library is missing
and how to install it. CPU and XNNPACK are built into the core library: nothing to probe.

Run `python -m edge_sdk.backends.onnxruntime.providers` to print the result for every provider.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import io
import logging
import os
import re
import sys
import warnings
from pathlib import Path

from .library import import_onnxruntime

log = logging.getLogger(__name__)

PROVIDER_LIBRARIES: dict[str, str] = {
    "CUDAExecutionProvider": "libonnxruntime_providers_cuda.so",
    "TensorrtExecutionProvider": "libonnxruntime_providers_tensorrt.so",
    "OpenVINOExecutionProvider": "libonnxruntime_providers_openvino.so",
    "CANNExecutionProvider": "libonnxruntime_providers_cann.so",
    "MIGraphXExecutionProvider": "libonnxruntime_providers_migraphx.so",
    "ROCMExecutionProvider": "libonnxruntime_providers_rocm.so",
}
"""Providers ONNX Runtime loads from a shared library of their own (Linux names)."""
SHARED_LIBRARY = "libonnxruntime_providers_shared.so"
NVIDIA_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})
TENSORRT_LIBRARIES = ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser")
"""Loaded in this order from the `tensorrt_libs` pip package, which is not on the loader's path."""

_MISSING = re.compile(r"(\S+\.so[\d.]*): cannot open shared object file")
_CUDA_LIBRARIES = ("libcublas", "libcudart", "libcufft", "libcurand", "libnvrtc", "libnvJitLink", "libcusparse")
_CANN_LIBRARIES = ("libascend", "libacl", "libge_", "libgraph", "libruntime", "libhccl", "libopsproto")
_PROVIDER_HINTS = {
    "CUDAExecutionProvider": "pip install 'onnxruntime-gpu[cuda,cudnn]' (on a Jetson: JetPack's CUDA and cuDNN)",
    "TensorrtExecutionProvider": "install TensorRT (pip install 'tensorrt-cu{cu}-libs'; on a Jetson: JetPack's TensorRT)",
    "OpenVINOExecutionProvider": "pip install 'edge-sdk[openvino]'",
    "CANNExecutionProvider": "install the Ascend CANN toolkit and source its set_env.sh",
}


def capi_folder() -> Path | None:
    """The installed onnxruntime package's `capi/` folder (found without importing it), or None."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "capi"


def tensorrt_libs_folder() -> Path | None:
    """The folder of the `tensorrt_libs` pip package (TensorRT's libraries), or None."""
    spec = importlib.util.find_spec("tensorrt_libs")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def available_providers() -> list[str]:
    """What the installed onnxruntime lists, loadable or not; [] without onnxruntime."""

    return list(import_onnxruntime().get_available_providers())


def provider_load_problem(ort_name: str, capi: Path | None = None) -> str | None:
    """None when `ort_name`'s library loads here (or has none), else one line: what is missing, how to install it."""
    folder = capi if capi is not None else capi_folder()
    if folder is None or not sys.platform.startswith("linux"):
        return None
    return _load_problem(ort_name, folder, tensorrt_libs_folder())


def loadable_providers() -> list[str]:
    """`get_available_providers()` without the providers whose libraries cannot load here."""
    return [name for name in available_providers() if provider_load_problem(name) is None]


def skip_unloadable(ort_name: str) -> bool:
    """True when onnxruntime lists `ort_name` but it cannot load; says so in one warning, once per process."""
    if ort_name not in PROVIDER_LIBRARIES or ort_name not in available_providers():
        return False
    problem = provider_load_problem(ort_name)
    if problem is None:
        return False
    _warn_once(ort_name, problem)
    return True


def clear_cache() -> None:
    """Forget probe results and warnings (for tests, or after installing libraries into a running process)."""
    _load_problem.cache_clear()
    _preload_cuda.cache_clear()
    _preload_tensorrt.cache_clear()
    _warned.clear()


_warned: set[str] = set()


def _warn_once(ort_name: str, problem: str) -> None:
    if ort_name not in _warned:
        _warned.add(ort_name)
        log.warning("skipping %s, it is listed but cannot load: %s", ort_name, problem)


@functools.cache
def _load_problem(ort_name: str, capi: Path, tensorrt_libs: Path | None) -> str | None:
    library = PROVIDER_LIBRARIES.get(ort_name)
    if library is None or not (capi / library).is_file():
        return None  # built in, or a build this probe does not know: ONNX Runtime decides
    if ort_name in NVIDIA_PROVIDERS:
        _preload_cuda()
    if ort_name == "TensorrtExecutionProvider" and tensorrt_libs is not None:
        _preload_tensorrt(tensorrt_libs)
    try:
        if (capi / SHARED_LIBRARY).is_file():
            ctypes.CDLL(str(capi / SHARED_LIBRARY), mode=os.RTLD_GLOBAL)
        ctypes.CDLL(str(capi / library), mode=os.RTLD_LOCAL)
    except OSError as error:
        return describe_load_error(ort_name, str(error))
    return None


def describe_load_error(ort_name: str, error: str) -> str:
    """One line from a dlopen error: the missing library and how to install it."""
    match = _MISSING.search(error)
    if match is None:
        text = error.strip().splitlines()[0] if error.strip() else "unknown error"
        return f"its library fails to load ({text}); {_provider_hint(ort_name)}"
    missing = Path(match.group(1)).name
    return f"{missing} is missing; {install_hint(missing, ort_name)}"


def install_hint(missing: str, ort_name: str) -> str:
    """How to get the library `missing` (a soname like libnvinfer.so.10) that `ort_name` needs."""
    cuda = _cuda_major()
    cu = cuda or "12"
    major = missing.rsplit(".so.", 1)[1].split(".")[0] if ".so." in missing else None
    pin = f"=={major}.*" if major else ""
    if missing.startswith(TENSORRT_LIBRARIES):
        return f"pip install 'tensorrt-cu{cu}-libs{pin}' (on a Jetson: JetPack's TensorRT)"
    if missing.startswith("libcudnn"):
        return f"pip install 'nvidia-cudnn-cu{cu}{pin}' (on a Jetson: JetPack's cuDNN)"
    if missing.startswith("libcuda.so"):
        return "install the NVIDIA driver (libcuda comes with it)"
    if missing.startswith(_CUDA_LIBRARIES):
        return f"pip install 'onnxruntime-gpu[cuda,cudnn]' (NVIDIA's CUDA {cu} wheels; on a Jetson: JetPack's CUDA)"
    if missing.startswith("libopenvino"):
        return "pip install openvino (the version onnxruntime-openvino was built with)"
    if missing.startswith(_CANN_LIBRARIES):
        return "install the Ascend CANN toolkit and source its set_env.sh (/usr/local/Ascend/ascend-toolkit)"
    return _provider_hint(ort_name, default="install the library or put its folder on LD_LIBRARY_PATH")


def _provider_hint(ort_name: str, default: str = "reinstall onnxruntime") -> str:
    return _PROVIDER_HINTS.get(ort_name, default).format(cu=_cuda_major() or "12")


def _cuda_major() -> str | None:
    """The CUDA major version the installed onnxruntime was built with, when it says."""
    try:
        from onnxruntime.capi import build_and_package_info
    except ImportError:
        return None
    version = str(getattr(build_and_package_info, "cuda_version", "") or "")
    return version.split(".")[0] if version.split(".")[0].isdigit() else None


@functools.cache
def _preload_cuda() -> None:
    """Load CUDA and cuDNN from the nvidia-* wheels with `onnxruntime.preload_dlls()` (1.21+), as ONNX
    Runtime's docs ask; it prints its failures, which the probe's own line replaces."""
    with contextlib.suppress(Exception):  # a CPU-only or older onnxruntime: nothing to preload
        import onnxruntime

        preload = getattr(onnxruntime, "preload_dlls", None)
        if preload is not None and _cuda_major() is not None:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                preload()


@functools.cache
def _preload_tensorrt(tensorrt_libs: Path) -> None:
    """Load TensorRT from its pip wheel by full path (that folder is not on the loader's path); a
    later dlopen of the provider, the probe's or a session's, finds them loaded by soname."""
    for stem in TENSORRT_LIBRARIES:
        for path in sorted(tensorrt_libs.glob(f"{stem}.so.*")):
            if re.fullmatch(rf"{stem}\.so\.\d+", path.name):
                with contextlib.suppress(OSError):
                    ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)


def _main() -> None:
    """Print, for every provider onnxruntime lists, whether it loads here."""
    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__} ({capi_folder()}), cuda {_cuda_major() or 'none'}")
    for name in onnxruntime.get_available_providers():
        problem = provider_load_problem(name)
        print(f"{name}: {'usable' if problem is None else 'listed but cannot load: ' + problem}")


if __name__ == "__main__":
    _main()
