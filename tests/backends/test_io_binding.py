"""GPU feeding of ONNX Runtime engines: the io_binding and cuda_graph options, which sessions take the
I/O binding path, and the binding itself.

The binding logic runs here on the CPU (ONNX Runtime's I/O binding and OrtValues work on CPU memory
too, and a CPU session ignores `gpu_graph_id`); the tests marked `gpu` run the real CUDA path and skip
elsewhere with the provider probe's reason.
"""

from __future__ import annotations

import ctypes
import gc
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

from edge_sdk.backends.onnxruntime import host_memory, io_binding
from edge_sdk.backends.onnxruntime.builder import OPTIMIZED_MODEL
from edge_sdk.backends.onnxruntime.io_binding import (
    BoundSession,
    DeviceArray,
    binding_device,
    cuda_graph_request,
    device_array,
    with_cuda_graph,
)
from edge_sdk.backends.onnxruntime.options import OnnxRuntimeOptions
from edge_sdk.backends.onnxruntime.runner import OnnxRuntimeRunner
from edge_sdk.backends.onnxruntime.session import provider_list, run_provider_list
from edge_sdk.core.errors import BackendUnavailableError, ConfigError, EngineBuildError, ModelError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from tools.harness.onnx_models import float_classifier

PROFILE_LINES = [
    "name: gpu-box",  # 1
    "description: GPU feeding options",  # 2
    "priority: 10",  # 3
    "detect: {}",  # 4
    "precisions: [fp32, fp16]",  # 5
    "default_precision: fp32",  # 6
    "engine:",  # 7
    "  backend: onnxruntime",  # 8
    "  io_binding: auto",  # 9
    "  execution_providers:",  # 10
    "    - type: cuda",  # 11
    "      cuda_graph: false",  # 12
    "    - type: cpu",  # 13
]


def load_profile(tmp_path: Path, **lines: str) -> DeviceProfile:
    """The profile above with numbered lines replaced (`l9="..."`)."""
    text = list(PROFILE_LINES)
    for key, value in lines.items():
        text[int(key[1:]) - 1] = value
    (tmp_path / "gpu-box.yaml").write_text("\n".join(text) + "\n", encoding="utf-8")
    return ProfileCatalog(tmp_path).load("gpu-box")


def ort_options(io: str = "auto", cuda_graph: object = False, first: str = "cuda") -> OnnxRuntimeOptions:
    cuda = {"type": "cuda", "cuda_graph": cuda_graph}
    providers = [cuda, {"type": "cpu"}] if first == "cuda" else [{"type": "cpu"}, cuda]
    return OnnxRuntimeOptions.model_validate(
        {"backend": "onnxruntime", "io_binding": io, "execution_providers": providers}
    )


class FakeSession:
    """What binding_device reads from a session."""

    def __init__(self, providers: list[str], device_id: str = "0"):
        self.providers = providers
        self.device_id = device_id

    def get_providers(self) -> list[str]:
        return self.providers

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: {"device_id": self.device_id} for name in self.providers}


class CudaArrayLike:
    """An object that says it is in GPU memory, as CuPy and PyTorch arrays do."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", strides: tuple[int, ...] | None = None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0xDEAD0000, False),
            "strides": strides,
            "version": 3,
        }


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return float_classifier(tmp_path_factory.mktemp("models") / "float_classifier.onnx")


@pytest.fixture
def cpu_session(classifier: Path) -> Any:
    return onnxruntime.InferenceSession(str(classifier), providers=["CPUExecutionProvider"])


def images(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def expected(session: Any, batch: np.ndarray) -> np.ndarray:
    return session.run(["logits"], {"images": batch})[0]


def on_cpu_as_device(array: np.ndarray) -> DeviceArray:
    """A 'device' input in CPU memory, which a BoundSession on device 'cpu' binds by address."""
    return DeviceArray(array.ctypes.data, array.shape, array.dtype, array)


# --- Options -------------------------------------------------------------------------------------------------------


def test_options_when_unset_bind_io_on_gpus_and_leave_cuda_graphs_off(tmp_path: Path) -> None:
    profile = load_profile(tmp_path, l9="  # io_binding unset", l12="      # cuda_graph unset")
    cuda = profile.engine.execution_providers[0]
    assert profile.engine.io_binding == "auto", "GPU sessions must be fed through I/O binding by default"
    assert cuda.cuda_graph is False, "CUDA graphs must be opt-in"  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "value"), [("true", True), ("auto", "auto"), ("false", False)])
def test_options_when_cuda_graph_is_set_keep_it(tmp_path: Path, text: str, value: object) -> None:
    profile = load_profile(tmp_path, l12=f"      cuda_graph: {text}")
    assert profile.engine.execution_providers[0].cuda_graph == value  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "text", "key", "fragment"),
    [
        pytest.param(
            12, "      cuda_graph: yes please", "engine.execution_providers.0.cuda_graph'", "'auto'", id="word"
        ),
        pytest.param(12, "      cuda_graph: 1", "engine.execution_providers.0.cuda_graph'", "got 1", id="number"),
        pytest.param(9, "  io_binding: on", "engine.io_binding'", "'auto' or 'off'", id="io-binding-on"),
        pytest.param(9, "  io_binding: fast", "engine.io_binding'", "'fast'", id="io-binding-word"),
        pytest.param(
            13, "    - {type: cpu, cuda_graph: true}", "engine.execution_providers.1", "unknown key", id="cpu"
        ),
    ],
)
def test_options_when_a_value_is_wrong_give_one_line_with_file_line_and_key(
    tmp_path: Path, line: int, text: str, key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_profile(tmp_path, **{f"l{line}": text})
    message = str(raised.value)
    assert f"gpu-box.yaml:{line}" in message, f"the error names the file and line {line}: {message}"
    assert f"key '{key}" in message, f"the error names the key {key}: {message}"
    assert fragment in message, f"the error shows what is allowed or what was given ({fragment}): {message}"
    assert "\n" not in message, f"one line: {message!r}"


def test_options_when_cuda_graph_is_true_without_io_binding_refuse_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_profile(tmp_path, l9="  io_binding: off", l12="      cuda_graph: true")
    message = str(raised.value)
    assert "cuda_graph: true needs io_binding: auto" in message, message
    assert "\n" not in message, f"one line: {message!r}"


def test_options_when_cuda_graph_is_auto_without_io_binding_load(tmp_path: Path) -> None:
    profile = load_profile(tmp_path, l9="  io_binding: off", l12="      cuda_graph: auto")
    assert cuda_graph_request(profile.engine, [("CUDAExecutionProvider", {})]) is False, "auto without binding = off"


@pytest.mark.parametrize(
    ("io", "graph", "first", "wanted"),
    [
        ("auto", True, "cuda", True),
        ("auto", "auto", "cuda", "auto"),
        ("auto", False, "cuda", False),
        ("auto", True, "cpu", False),
        ("off", "auto", "cuda", False),
    ],
)
def test_cuda_graph_request_when_cuda_comes_first_is_the_profiles_setting(
    io: str, graph: object, first: str, wanted: object
) -> None:
    options = ort_options(io, graph, first)
    providers: list[tuple[str, dict[str, Any]]] = [(p.ort_name, {}) for p in options.execution_providers]
    assert cuda_graph_request(options, providers) == wanted


def test_with_cuda_graph_turns_capture_on_for_cuda_only() -> None:
    providers: list[tuple[str, dict[str, Any]]] = [
        ("CUDAExecutionProvider", {"device_id": "1"}),
        ("CPUExecutionProvider", {}),
    ]
    assert with_cuda_graph(providers) == [
        ("CUDAExecutionProvider", {"device_id": "1", "enable_cuda_graph": "1"}),
        ("CPUExecutionProvider", {}),
    ]
    assert providers[0][1] == {"device_id": "1"}, "the profile's list must not be changed in place"


def test_provider_options_when_cuda_graph_is_true_do_not_reach_the_build(tmp_path: Path) -> None:
    # The build session saves the optimised graph; a model CUDA graphs cannot capture must still build.
    [cuda, _] = ort_options(cuda_graph=True).execution_providers
    assert "enable_cuda_graph" not in cuda.ort_options("fp32", str(tmp_path))


def test_prefer_nhwc_reaches_the_sessions_that_run_the_engine_not_the_build(tmp_path: Path) -> None:
    # The build saves a layout-neutral graph; an NHWC layout saved into it would tie the engine to that option.
    options = OnnxRuntimeOptions.model_validate(
        {"backend": "onnxruntime", "execution_providers": [{"type": "cuda", "prefer_nhwc": True}, {"type": "cpu"}]}
    )
    assert provider_list(options, "fp16", tmp_path)[0] == ("CUDAExecutionProvider", {"device_id": "0"})
    assert run_provider_list(options, "fp16", tmp_path) == [
        ("CUDAExecutionProvider", {"device_id": "0", "prefer_nhwc": "1"}),
        ("CPUExecutionProvider", {}),
    ]
    assert run_provider_list(ort_options(), "fp32", tmp_path)[0] == ("CUDAExecutionProvider", {"device_id": "0"})


def test_conv_algo_search_reaches_the_sessions_that_run_the_engine(tmp_path: Path) -> None:
    # a serving loop meets many batch sizes; exhaustive (ONNX Runtime's default) searches kernels for each
    options = OnnxRuntimeOptions.model_validate(
        {"backend": "onnxruntime", "execution_providers": [{"type": "cuda", "conv_algo_search": "heuristic"}]}
    )
    assert provider_list(options, "fp32", tmp_path)[0] == ("CUDAExecutionProvider", {"device_id": "0"})
    assert run_provider_list(options, "fp32", tmp_path)[0] == (
        "CUDAExecutionProvider",
        {"device_id": "0", "cudnn_conv_algo_search": "HEURISTIC"},
    )


# --- Which sessions take the binding path ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("providers", "io", "wanted"),
    [
        (["CUDAExecutionProvider", "CPUExecutionProvider"], "auto", ("cuda", 2)),
        (["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], "auto", ("cuda", 2)),
        (["CUDAExecutionProvider", "CPUExecutionProvider"], "off", None),
        (["CPUExecutionProvider"], "auto", None),
        (["XnnpackExecutionProvider", "CPUExecutionProvider"], "auto", None),
    ],
)
def test_binding_device_when_the_first_provider_is_a_gpu_one_is_that_gpu(
    providers: list[str], io: str, wanted: tuple[str, int] | None
) -> None:
    assert binding_device(ort_options(io), FakeSession(providers, device_id="2")) == wanted


def test_runner_when_profile_is_cpu_takes_the_plain_session_run_path(
    classifier: Path, cpu_session: Any, tmp_path: Path
) -> None:
    # Given an engine entry and CPU-only options (io_binding auto, as every profile has by default)
    shutil.copy(classifier, tmp_path / OPTIMIZED_MODEL)
    options = OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"})

    # When it runs
    runner = OnnxRuntimeRunner(tmp_path, options, "fp32")
    with runner:
        outputs = runner.infer({"images": images(2, seed=1)})
        feeding, bound = runner.feeding, runner._bound

    # Then it went through session.run, with the same result as a plain session
    assert feeding == "session.run", "a CPU session must not take the I/O binding path"
    assert bound is None
    np.testing.assert_allclose(outputs["logits"], expected(cpu_session, images(2, seed=1)), rtol=1e-5, atol=1e-5)


def test_runner_with_a_binding_sends_numpy_through_session_run_and_binds_device_inputs(
    classifier: Path, cpu_session: Any, tmp_path: Path
) -> None:
    # Given a runner whose session has a binding (as a GPU session under io_binding: auto; here on CPU memory)
    shutil.copy(classifier, tmp_path / OPTIMIZED_MODEL)
    runner = OnnxRuntimeRunner(tmp_path, OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"}), "fp32")
    with runner:
        runner._bound = bound = BoundSession(runner._session, ["logits"], "cpu", 0)
        # When numpy frames come, then they take session.run (the H200 measured binding them no faster)
        host = runner.infer({"images": images(2, seed=1)})
        assert bound.signatures == 0, "numpy inputs must not go through the binding"
        # and when a device array comes, it is bound where it is
        device = runner.infer({"images": on_cpu_as_device(images(2, seed=1))})
        assert bound.signatures == 1
    want = expected(cpu_session, images(2, seed=1))
    np.testing.assert_allclose(host["logits"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(device["logits"], want, rtol=1e-5, atol=1e-5)


def test_runner_with_a_binding_binds_page_locked_host_inputs(
    classifier: Path, cpu_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given page-locked arrays (a stand-in allocator of ordinary memory) and a runner with a binding
    monkeypatch.setattr(host_memory, "_ALLOCATORS", [("stand-in", lambda shape, dtype: np.empty(shape, dtype))])
    pinned = host_memory.pinned_empty((2, 3, 8, 8), np.float32)
    pinned[:] = images(2, seed=4)
    assert host_memory.is_pinned(pinned) and host_memory.is_pinned(pinned[1])
    assert not host_memory.is_pinned(images(2, seed=4))
    shutil.copy(classifier, tmp_path / OPTIMIZED_MODEL)
    runner = OnnxRuntimeRunner(tmp_path, OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"}), "fp32")
    with runner:
        runner._bound = bound = BoundSession(runner._session, ["logits"], "cpu", 0)
        # When a page-locked batch comes, then it takes the binding (the H200's CNN: 16,789 vs 7,314 items/s)
        got = runner.infer({"images": pinned})
        assert bound.signatures == 1
    np.testing.assert_allclose(got["logits"], expected(cpu_session, images(2, seed=4)), rtol=1e-5, atol=1e-5)
    # and an array freed leaves no pinned range behind
    del pinned
    gc.collect()
    assert not host_memory._pinned


def test_runner_when_cpu_engine_gets_a_device_array_says_so_in_one_line(classifier: Path, tmp_path: Path) -> None:
    shutil.copy(classifier, tmp_path / OPTIMIZED_MODEL)
    options = OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"})
    runner = OnnxRuntimeRunner(tmp_path, options, "fp32")
    with runner, pytest.raises(ModelError) as raised:
        runner.infer({"images": CudaArrayLike((2, 3, 8, 8))})
    message = str(raised.value)
    assert "in GPU memory" in message and "CPUExecutionProvider" in message, message
    assert "\n" not in message


def test_runner_when_a_device_array_has_the_wrong_dtype_names_it(classifier: Path, tmp_path: Path) -> None:
    shutil.copy(classifier, tmp_path / OPTIMIZED_MODEL)
    options = OnnxRuntimeOptions.model_validate({"backend": "onnxruntime"})
    runner = OnnxRuntimeRunner(tmp_path, options, "fp32")
    with runner, pytest.raises(ModelError) as raised:
        runner.infer({"images": CudaArrayLike((2, 3, 8, 8), typestr="|u1")})
    assert "expected dtype float32, got uint8" in str(raised.value), "device inputs are checked like numpy ones"


# --- Device arrays --------------------------------------------------------------------------------------------------


def test_device_array_when_value_has_a_cuda_array_interface_reads_address_shape_and_dtype() -> None:
    value = CudaArrayLike((2, 3), typestr="|u1")
    assert device_array(value) == DeviceArray(0xDEAD0000, (2, 3), np.dtype(np.uint8), value)


def test_device_array_when_strides_are_not_contiguous_refuses() -> None:
    with pytest.raises(ModelError, match="C-contiguous"):
        device_array(CudaArrayLike((2, 3), strides=(4, 8)))


def test_device_array_when_value_is_numpy_or_a_cpu_ort_value_is_none() -> None:
    array = np.zeros((2, 3), np.float32)
    assert device_array(array) is None
    assert device_array(onnxruntime.OrtValue.ortvalue_from_numpy(array)) is None


# --- The binding, on CPU memory -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["binding", "graph-mode"])
def test_bound_session_when_inputs_change_returns_each_calls_own_outputs(cpu_session: Any, cuda_graph: bool) -> None:
    # Given a bound session
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0, cuda_graph=cuda_graph)
    first, second = images(2, seed=1), images(2, seed=2)

    # When the same shape runs with different data, then the first data again
    results = [bound.run({"images": batch})["logits"] for batch in (first, second, first)]

    # Then every call has its own result, none overwritten by a later call, from one binding
    for got, batch in zip(results, (first, second, first), strict=True):
        np.testing.assert_allclose(got, expected(cpu_session, batch), rtol=1e-5, atol=1e-5)
    assert bound.signatures == 1, "one input shape must reuse one binding"
    assert bound.graphs == (1 if cuda_graph else 0)


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["binding", "graph-mode"])
def test_bound_session_when_shapes_differ_binds_each_shape(cpu_session: Any, cuda_graph: bool) -> None:
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0, cuda_graph=cuda_graph)
    for batch in (images(1, 1), images(4, 2), images(1, 3), images(4, 4)):
        np.testing.assert_allclose(bound.run({"images": batch})["logits"], expected(cpu_session, batch), atol=1e-5)
    assert bound.signatures == 2, "two shapes, two bindings"


def test_bound_session_when_input_is_a_device_array_binds_it_where_it_is(cpu_session: Any) -> None:
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0)
    buffer = images(2, seed=1)
    first = bound.run({"images": on_cpu_as_device(buffer)})["logits"]
    buffer[:] = images(2, seed=2)  # a producer refilling its buffer
    second = bound.run({"images": on_cpu_as_device(buffer)})["logits"]
    np.testing.assert_allclose(first, expected(cpu_session, images(2, seed=1)), atol=1e-5)
    np.testing.assert_allclose(second, expected(cpu_session, images(2, seed=2)), atol=1e-5)


def test_bound_session_in_graph_mode_gives_each_device_buffer_its_own_graph(cpu_session: Any) -> None:
    # A replay reads the addresses recorded at capture: a second buffer needs its own graph
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0, cuda_graph=True)
    ring = [images(2, seed=1), images(2, seed=2)]
    for _ in range(2):
        for slot in ring:
            got = bound.run({"images": on_cpu_as_device(slot)})["logits"]
            np.testing.assert_allclose(got, expected(cpu_session, slot), atol=1e-5)
    assert (bound.signatures, bound.graphs) == (2, 2), "one graph per buffer, reused on the next lap"


def test_bound_session_in_graph_mode_past_the_graph_limit_runs_uncaptured(
    cpu_session: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(io_binding, "MAX_CUDA_GRAPHS", 2)
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0, cuda_graph=True)
    for size in (1, 2, 3, 4):
        batch = images(size, seed=size)
        np.testing.assert_allclose(bound.run({"images": batch})["logits"], expected(cpu_session, batch), atol=1e-5)
    assert bound.graphs == 2, "no more graphs than the limit"
    assert [r.message for r in caplog.records if "CUDA graphs" in r.message], "one warning says further ones are not"


def test_bound_session_when_many_shapes_come_keeps_a_bounded_number_of_bindings(
    cpu_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(io_binding, "MAX_BINDINGS", 3)
    bound = BoundSession(cpu_session, ["logits"], "cpu", 0)
    for size in range(1, 7):
        bound.run({"images": images(size, seed=size)})
    assert bound.signatures == 3, "the oldest bindings (and their device buffers) go first"


# --- Page-locked host memory ----------------------------------------------------------------------------------------


def test_pinned_empty_when_no_allocator_is_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        raise ImportError("no module")

    monkeypatch.setattr(host_memory, "_ALLOCATORS", [("cuda-python", missing), ("cupy", missing)])
    with pytest.raises(BackendUnavailableError) as raised:
        host_memory.pinned_empty((2, 3), np.float32)
    message = str(raised.value)
    assert "cuda-python is not installed; cupy is not installed" in message, message
    assert "pip install cuda-python" in message and "\n" not in message, message


def test_pinned_empty_with_cuda_python_returns_an_array_over_the_allocation_and_frees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a stand-in for cuda.bindings.runtime that hands out ordinary memory
    blocks: dict[int, Any] = {}
    freed: list[int] = []

    def host_alloc(size: int, flags: int) -> tuple[int, int]:
        block = ctypes.create_string_buffer(size)
        blocks[ctypes.addressof(block)] = block
        return 0, ctypes.addressof(block)

    def free_host(pointer: int) -> tuple[int]:
        freed.append(pointer)
        return (0,)

    runtime = types.SimpleNamespace(
        cudaHostAlloc=host_alloc,
        cudaFreeHost=free_host,
        cudaHostAllocDefault=0,
        cudaError_t=types.SimpleNamespace(cudaSuccess=0),
    )
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = runtime  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)

    # When a pinned array is asked for, written and dropped
    array = host_memory.pinned_empty((2, 3, 4), np.float32)
    array[:] = 1.5
    (pointer,) = blocks
    assert (array.shape, array.dtype, array.ctypes.data) == ((2, 3, 4), np.float32, pointer)
    assert array.flags.c_contiguous and array.flags.writeable
    view = array[0]
    del array
    gc.collect()
    assert not freed, "a view keeps the allocation alive"
    del view
    gc.collect()

    # Then the allocation was freed once nothing used it
    assert freed == [pointer]


# --- On an NVIDIA GPU -----------------------------------------------------------------------------------------------


def gpu_profile(catalog: ProfileCatalog, **cuda: object) -> DeviceProfile:
    """x86-nvidia with its CUDA provider's options changed."""
    profile = catalog.load("x86-nvidia")
    providers = [p.model_copy(update=cuda) if p.type == "cuda" else p for p in profile.engine.execution_providers]
    return profile.model_copy(update={"engine": profile.engine.model_copy(update={"execution_providers": providers})})


# The CUDA EP computes fp32 convolutions and matmuls in TF32 on Ampere and later (use_tf32, its
# default): 10 mantissa bits, so results differ from the CPU's in the third significant digit (the
# H200 gave 0.005 on logits of about 7).
TF32_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


@pytest.mark.gpu
@pytest.mark.parametrize(("cuda_graph", "feeding"), [(False, "io_binding"), (True, "cuda_graph")])
def test_gpu_engine_runs_through_io_binding_with_numpy_and_device_inputs(
    catalog: ProfileCatalog,
    engine_cache: EngineCache,
    classifier: Path,
    cpu_session: Any,
    cuda_graph: bool,
    feeding: str,
) -> None:
    prepared = prepare_engine(classifier, gpu_profile(catalog, cuda_graph=cuda_graph), "fp32", engine_cache)
    with prepared.open() as runner:
        assert runner.feeding == feeding  # type: ignore[attr-defined]
        for seed in (1, 2, 1):
            batch = images(4, seed)
            want = expected(cpu_session, batch)
            np.testing.assert_allclose(runner.infer({"images": batch})["logits"], want, **TF32_TOLERANCE)
            on_gpu = onnxruntime.OrtValue.ortvalue_from_numpy(batch, "cuda", 0)
            np.testing.assert_allclose(runner.infer({"images": on_gpu})["logits"], want, **TF32_TOLERANCE)


@pytest.mark.gpu
def test_gpu_engine_when_the_model_has_a_loop_refuses_cuda_graph_true_in_one_line(
    catalog: ProfileCatalog, engine_cache: EngineCache, demo_model: Path
) -> None:
    # The build's equivalence gate opens the engine with the profile's options, so either refuses
    with pytest.raises(EngineBuildError) as raised:
        prepare_engine(demo_model, gpu_profile(catalog, cuda_graph=True), "fp32", engine_cache).open().activate()
    message = str(raised.value)
    assert "cuda_graph: true" in message and "\n" not in message, message


@pytest.mark.gpu
def test_gpu_engine_when_the_model_has_a_loop_and_cuda_graph_is_auto_runs_without(
    catalog: ProfileCatalog, engine_cache: EngineCache, demo_model: Path, astronaut_bgr: np.ndarray
) -> None:
    prepared = prepare_engine(demo_model, gpu_profile(catalog, cuda_graph="auto"), "fp32", engine_cache)
    frame = np.ascontiguousarray(astronaut_bgr[:, :, ::-1][np.newaxis])
    with prepared.open() as runner:
        assert runner.feeding == "io_binding"  # type: ignore[attr-defined]
        assert float(runner.infer({"image_tensor:0": frame})["detection_scores:0"][0, 0]) > 0.85


@pytest.mark.gpu
def test_gpu_pinned_host_input_gives_the_same_result(
    catalog: ProfileCatalog, engine_cache: EngineCache, classifier: Path, cpu_session: Any
) -> None:
    pinned = host_memory.pinned_empty((4, 3, 8, 8), np.float32)
    pinned[:] = images(4, seed=3)
    prepared = prepare_engine(classifier, catalog.load("x86-nvidia"), "fp32", engine_cache)
    with prepared.open() as runner:
        got = runner.infer({"images": pinned})["logits"]
    np.testing.assert_allclose(got, expected(cpu_session, images(4, seed=3)), **TF32_TOLERANCE)
