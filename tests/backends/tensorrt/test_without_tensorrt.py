"""On a host without TensorRT (this one): the profiles that name TensorRT take their ONNX Runtime route with
one line saying why, `doctor` says which route is active, the backend's own errors are one clear line,
and a cached engine a backend calls stale is rebuilt with one log line (the engine header check's seam)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.backends.registry import get_backend, register_backend, unregister_backend
from edge_sdk.backends.tensorrt.builder import TensorRTBuilder
from edge_sdk.backends.tensorrt.library import tensorrt_problem
from edge_sdk.backends.tensorrt.options import TensorRTOptions
from edge_sdk.backends.tensorrt.runner import TensorRTRunner
from edge_sdk.core.errors import BackendUnavailableError
from edge_sdk.core.host import HostFacts
from edge_sdk.doctor import diagnose
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog
from edge_sdk.profiles import route as route_module
from tools.harness.onnx_models import float_classifier

from ..reference_backend import NAME, PROFILE_YAML, REFERENCE_BACKEND

pytestmark = pytest.mark.skipif(tensorrt_problem() is None, reason="TensorRT is importable here")
HOST = HostFacts(arch="x86_64", cpu_model="Test CPU", cpu_flags=frozenset({"avx2"}))
TENSORRT_PROFILES = ("jetson-orin-dla", "jetson-orin-gpu", "x86-nvidia")


@pytest.mark.parametrize("name", TENSORRT_PROFILES)
def test_a_tensorrt_profile_takes_its_onnxruntime_route_with_one_line(
    name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(route_module, "_said", set())
    catalog = ProfileCatalog()
    written = catalog.load(name, as_written=True)
    assert written.engine.backend == "tensorrt" and written.fallback_engine is not None
    with caplog.at_level(logging.WARNING, "edge_sdk.profiles.route"):
        active = catalog.load(name)
        catalog.load(name)  # said once per process
    assert active.engine == written.fallback_engine and active.engine.backend == "onnxruntime"
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(
        f"profile {name}: using the onnxruntime route: tensorrt cannot run here"
    )
    assert "TensorRT's Python package is not importable" in lines[0]
    assert active.content_hash() != written.content_hash()  # engines of the two routes never share a cache entry


def test_listing_profiles_says_nothing_and_doctor_names_the_active_route(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "edge_sdk.profiles.route"):
        ProfileCatalog().load_all()
        report = diagnose(ProfileCatalog(), HostFacts(arch="x86_64", nvidia_gpus=("NVIDIA H200",)))
    assert not caplog.records
    facts = report.backends["tensorrt"]
    assert facts["TensorRT"].startswith("TensorRT's Python package is not importable")
    binding = facts["CUDA binding"]  # the binding the runner would use, or why none can run
    assert facts["DLA cores"] == "0" and (binding in ("cuda-python", "pycuda") or binding.startswith("no CUDA binding"))
    status = {status.name: status for status in report.profiles}["x86-nvidia"]
    said = status.note if status.usable else status.problem
    assert said is not None and said.startswith("route: onnxruntime, because tensorrt cannot run here")


def test_the_backends_own_entry_points_say_what_is_missing(tmp_path: Path) -> None:
    options = TensorRTOptions(backend="tensorrt")
    with pytest.raises(BackendUnavailableError, match=r"TensorRT's Python package is not importable .*docs/nvidia\.md"):
        TensorRTBuilder().version()
    with pytest.raises(BackendUnavailableError, match="not importable"):
        TensorRTBuilder().check(options, "fp16")
    (tmp_path / "engine.json").write_text(
        '{"format": 1, "target": {"tensorrt_version": "10.3.0", "gpu": "Orin", "compute_capability": "8.7", '
        '"dla_core": null, "jetson_model": null}, "precision": "fp16", "build_plan": {}, '
        '"inputs": [{"name": "x", "dtype": "float32", "shape": [1, 3]}], "outputs": []}'
    )
    runner = TensorRTRunner(tmp_path, options, "fp16")
    assert [meta.name for meta in runner.inputs] == ["x"]  # described from the header alone
    with pytest.raises(BackendUnavailableError, match="not importable"):
        runner.activate()


def test_a_profile_without_a_fallback_refuses_to_build_with_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    text = (Path(ProfileCatalog().directory) / "x86-nvidia.yaml").read_text()
    (folder / "x86-nvidia.yaml").write_text(text[: text.index("fallback_engine:")])
    profile = ProfileCatalog(folder).load("x86-nvidia")
    assert profile.engine.backend == "tensorrt"
    model = float_classifier(tmp_path / "m.onnx")
    with pytest.raises(BackendUnavailableError, match="not importable"):
        prepare_engine(model, profile, cache=EngineCache(tmp_path / "cache"), facts=HOST)


@pytest.fixture
def flaky_reference(tmp_path: Path) -> Iterator[list[str]]:
    """The reference backend with a `stale` hook that calls the first cached engine it sees stale."""
    calls: list[str] = []

    def stale(directory: Path, options: object) -> str | None:
        calls.append(directory.name)
        return (
            "the engine was built for TensorRT 10.3.0; here: TensorRT '10.3.0' -> '10.3.1'" if len(calls) == 1 else None
        )

    register_backend(dataclasses.replace(REFERENCE_BACKEND, stale=stale))
    yield calls
    unregister_backend(NAME)


def test_a_cached_engine_the_backend_calls_stale_is_rebuilt_with_one_line(
    flaky_reference: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "reference-box.yaml").write_text(PROFILE_YAML)
    profile = ProfileCatalog(folder).load("reference-box")
    cache = EngineCache(tmp_path / "cache")
    model = float_classifier(tmp_path / "m.onnx")
    assert prepare_engine(model, profile, cache=cache, facts=HOST).built
    with caplog.at_level(logging.WARNING, "edge_sdk.engines.engine"):
        again = prepare_engine(model, profile, cache=cache, facts=HOST)
    assert again.built, "the stale entry was rebuilt"
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        "rebuilding the cached engine: the engine was built for TensorRT 10.3.0; here: TensorRT '10.3.0' -> '10.3.1'"
    ]
    assert not prepare_engine(model, profile, cache=cache, facts=HOST).built  # fresh now: a cache hit
    assert get_backend(NAME).stale is not None
