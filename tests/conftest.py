"""Fixtures shared by every test package: the repo, the shipped model, caches, small videos."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_sdk.core.opencv import import_cv2
from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from edge_sdk.sources.synthetic import PanZoomSource
from tools.harness import onnx_models

# gRPC's fork support (grpcio 1.80 and later, grpc/grpc#43055) restarts its poller in every child that
# subprocess.Popen forks once a gRPC channel is open (the Triton tests open some); the child prints an
# epoll EBADF line on its stderr, which tests that read a command's stderr then see. Tests fork+exec only.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ("tests.support.brokers", "tests.support.browser")
"""`start_broker` and `topic_prefix`, defined once for every test package."""

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_MODEL = REPO_ROOT / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO_ROOT / "tools" / "assets" / "astronaut.jpg"


@pytest.fixture(autouse=True)
def _isolated_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the user's real engine cache."""
    monkeypatch.setenv("EDGE_SDK_CACHE_DIR", str(tmp_path / "default-engine-cache"))


@pytest.fixture
def engine_cache(tmp_path: Path) -> EngineCache:
    return EngineCache(tmp_path / "engines")


@pytest.fixture(scope="session")
def catalog() -> ProfileCatalog:
    return ProfileCatalog(REPO_ROOT / "device_profiles")


@pytest.fixture(scope="session")
def cpu_profile(catalog: ProfileCatalog) -> DeviceProfile:
    return catalog.load("x86-cpu")


@pytest.fixture(scope="session")
def demo_model() -> Path:
    return DEMO_MODEL


@pytest.fixture(scope="session")
def astronaut_bgr():  # type: ignore[no-untyped-def]
    image = import_cv2().imread(str(ASTRONAUT))
    assert image is not None, "the shipped astronaut photo must decode"
    return image


@pytest.fixture(scope="session")
def small_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 frames (320x240, mp4v) of a virtual camera panning across the astronaut photo."""
    cv2 = import_cv2()
    path = tmp_path_factory.mktemp("video") / "astronaut.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (320, 240))
    with PanZoomSource(ASTRONAUT, frames=24, size=(320, 240)) as source:
        for frame in source:
            writer.write(frame.image)
    writer.release()
    return path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    return {
        "float_classifier": onnx_models.float_classifier(folder / "float_classifier.onnx"),
        "float_classifier_batch1": onnx_models.float_classifier(folder / "float_classifier_b1.onnx", batch=1),
        "uint8_mean_classifier": onnx_models.uint8_mean_classifier(folder / "uint8_mean_classifier.onnx"),
    }


HARDWARE_MARKERS = {
    "tensorrt": ("TensorrtExecutionProvider", "needs onnxruntime with TensorRT and an NVIDIA GPU/Jetson"),
    "gpu": ("CUDAExecutionProvider", "needs onnxruntime-gpu and an NVIDIA GPU"),
    "atlas": ("CANNExecutionProvider", "needs onnxruntime-cann, the CANN toolkit and an Ascend NPU"),
}


SERVER_FIXTURES = frozenset({"start_broker", "rtsp_server"})
"""Fixtures that start a private Mosquitto or RTSP server: a test that uses one, directly or through another
fixture, is marked `broker`, which the fast lane (make test-fast) leaves out."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests that start servers `broker`; skip hardware tests, with the reason, where the provider they
    need is absent or cannot load."""
    from edge_sdk.backends.onnxruntime.providers import provider_load_problem

    try:
        import onnxruntime

        available = set(onnxruntime.get_available_providers())
    except ImportError:
        available = set()
    reasons: dict[str, str | None] = {}
    for marker, (provider, reason) in HARDWARE_MARKERS.items():
        if provider not in available:
            reasons[marker] = f"{reason} ({provider} not available here)"
        elif problem := provider_load_problem(provider):
            reasons[marker] = f"{provider} is listed but cannot load: {problem}"
        else:
            reasons[marker] = None
    reasons["cuda"] = _cuda_problem() if any(item.get_closest_marker("cuda") for item in items) else None
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)
        for marker, skip_reason in reasons.items():
            if skip_reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=skip_reason))


def _cuda_problem() -> str | None:
    """Why the `cuda` tests cannot run here (no CUDA device, or neither cuda-python nor pycuda), or None."""
    from edge_sdk.backends.tensorrt.cuda_runtime import open_cuda
    from edge_sdk.core.errors import BackendUnavailableError

    try:
        open_cuda("auto")
    except BackendUnavailableError as exc:
        return f"needs a CUDA device: {exc}"
    return None
