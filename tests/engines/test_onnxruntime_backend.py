"""The ONNX Runtime backend, run for real: the shipped detector, provider options, and errors users can act on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from edge_sdk.backends.onnxruntime import providers as provider_probe
from edge_sdk.backends.onnxruntime.options import OnnxRuntimeOptions
from edge_sdk.backends.onnxruntime.session import check_providers, provider_list, session_options
from edge_sdk.core.errors import BackendUnavailableError, ConfigError, EngineBuildError, ModelError
from edge_sdk.core.host import HostFacts
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from tools.harness import onnx_models

IMAGE_INPUT = "image_tensor:0"
# Where the shipped detector finds the astronaut: (ymin, xmin, ymax, xmax), normalised.
ASTRONAUT_BOX = (0.06, 0.01, 0.99, 0.73)


def detector_feed(bgr: np.ndarray) -> dict[str, np.ndarray]:
    """The detector takes uint8 NHWC RGB of any size."""
    return {IMAGE_INPUT: np.ascontiguousarray(bgr[:, :, ::-1])[None]}


def ort_options(*providers: dict[str, Any]) -> OnnxRuntimeOptions:
    return OnnxRuntimeOptions(backend="onnxruntime", execution_providers=list(providers))


def save_checked(graph: onnx.GraphProto, path: Path, *extra_opsets: tuple[str, int]) -> Path:
    """Save a model that onnx.checker accepts (so only ONNX Runtime can object to it)."""
    model = onnx_models.make_model(graph, 17, extra_opsets)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def identity_model(path: Path, elem_type: int) -> Path:
    """x [N, 4] -> Identity -> y, in the given ONNX element type."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", elem_type, ["N", 4])],
        [helper.make_tensor_value_info("y", elem_type, ["N", 4])],
    )
    return save_checked(graph, path)


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory, demo_model: Path, cpu_profile: DeviceProfile) -> PreparedEngine:
    """The shipped detector, built for x86-cpu on this host, then fetched again from the cache."""
    cache = EngineCache(tmp_path_factory.mktemp("detector-cache"))
    first = prepare_engine(demo_model, cpu_profile, cache=cache)
    cached = prepare_engine(demo_model, cpu_profile, cache=cache)
    assert first.built and not cached.built, "the second prepare must come from the cache"
    return cached


# --- The shipped detector -------------------------------------------------------------------------------------


def test_detector_when_built_for_x86_cpu_finds_the_astronaut(detector: PreparedEngine, astronaut_bgr: Any) -> None:
    # Given the cached detector engine and the astronaut photo
    # When the photo is run through it
    with detector.open() as runner:
        outputs = runner.infer(detector_feed(astronaut_bgr))

    # Then the best detection is the person, where the reference says
    score = float(outputs["detection_scores:0"][0, 0])
    box = outputs["detection_boxes:0"][0, 0]
    assert score > 0.85, f"the astronaut must be found with high confidence, got score {score:.3f}"
    np.testing.assert_allclose(
        box, ASTRONAUT_BOX, atol=0.05, err_msg="the astronaut's box must match the reference (ymin, xmin, ymax, xmax)"
    )


def test_detector_when_cached_engine_runs_matches_plain_onnxruntime_on_the_original_model(
    detector: PreparedEngine, demo_model: Path, astronaut_bgr: Any
) -> None:
    # Given the cached (optimised) engine and a plain ONNX Runtime session on the shipped model
    plain = onnxruntime.InferenceSession(str(demo_model), providers=["CPUExecutionProvider"])
    feed = detector_feed(astronaut_bgr)

    # When both run the same photo
    expected = dict(zip([o.name for o in plain.get_outputs()], plain.run(None, feed), strict=True))
    with detector.open() as runner:
        got = runner.infer(feed)

    # Then every output agrees within 1e-4
    assert set(got) == set(expected), "the engine must expose the model's outputs"
    for name, value in expected.items():
        np.testing.assert_allclose(
            got[name], value, atol=1e-4, err_msg=f"optimising the graph must not change output {name}"
        )


# --- Execution provider options -------------------------------------------------------------------------------


@pytest.fixture
def every_listed_provider_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Option mapping does not depend on the host: a GPU box without TensorRT's libraries (where the
    session list leaves TensorRT out, see test_provider_probe.py) maps the profiles the same."""
    monkeypatch.setattr(provider_probe, "skip_unloadable", lambda ort_name: False)


@pytest.mark.usefixtures("every_listed_provider_loads")
def test_provider_list_when_profile_is_jetson_orin_dla_puts_tensorrt_on_dla_core_0_first(
    catalog: ProfileCatalog, tmp_path: Path
) -> None:
    # Given the Jetson DLA profile and a cache entry directory
    entry = tmp_path / "entry"

    # When its providers are mapped for fp16
    providers = provider_list(catalog.load("jetson-orin-dla").engine, "fp16", entry)

    # Then TensorRT on DLA core 0 in fp16 comes first, then CUDA, then CPU
    names = [name for name, _ in providers]
    assert names == ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], (
        "providers must keep the profile's priority order"
    )
    trt = providers[0][1]
    assert trt["trt_dla_enable"] == "True", "the DLA profile must enable DLA"
    assert trt["trt_dla_core"] == "0", "the DLA profile must pick DLA core 0"
    assert trt["trt_fp16_enable"] == "True", "fp16 must enable TensorRT's fp16 mode"
    assert trt["trt_int8_enable"] == "False", "fp16 must not enable int8"
    assert trt["trt_max_workspace_size"] == str(1024 * 1024 * 1024), "workspace_mb must be passed in bytes"
    assert trt["trt_engine_cache_enable"] == "True", "TensorRT must cache its engines"
    assert Path(trt["trt_engine_cache_path"]).is_relative_to(entry), "TensorRT's engines must live in the entry"
    assert providers[1][1] == {"device_id": "0"}, "CUDA must run on GPU 0"
    assert providers[2][1] == {}, "the CPU provider needs no options"
    assert all(isinstance(v, str) for _, opts in providers for v in opts.values()), "ORT wants string options"


@pytest.mark.usefixtures("every_listed_provider_loads")
@pytest.mark.parametrize(("precision", "fp16"), [("fp16", "True"), ("fp32", "False")])
def test_provider_list_when_profile_is_x86_nvidia_uses_tensorrt_on_the_gpu_without_dla(
    precision: str, fp16: str, catalog: ProfileCatalog, tmp_path: Path
) -> None:
    # Given the x86 NVIDIA profile
    # When its providers are mapped
    providers = dict(provider_list(catalog.load("x86-nvidia").engine, precision, tmp_path))  # type: ignore[arg-type]

    # Then TensorRT runs on the GPU (no DLA keys) with fp16 only when asked
    trt = providers["TensorrtExecutionProvider"]
    assert not {k for k in trt if k.startswith("trt_dla")}, "a GPU profile must not set any DLA option"
    assert trt["trt_fp16_enable"] == fp16, f"{precision} must set trt_fp16_enable={fp16}"
    assert trt["trt_max_workspace_size"] == str(2048 * 1024 * 1024), "the profile's 2048 MiB must be passed in bytes"


@pytest.mark.usefixtures("every_listed_provider_loads")
@pytest.mark.parametrize(("precision", "mode"), [("fp16", "force_fp16"), ("fp32", "force_fp32")])
def test_provider_list_when_profile_is_atlas_npu_maps_precision_to_cann_precision_mode(
    precision: str, mode: str, catalog: ProfileCatalog, tmp_path: Path
) -> None:
    # Given the Atlas NPU profile
    # When its providers are mapped
    providers = provider_list(catalog.load("atlas-npu").engine, precision, tmp_path)  # type: ignore[arg-type]

    # Then CANN on NPU 0 comes first with the matching precision mode
    assert providers[0] == (
        "CANNExecutionProvider",
        {
            "device_id": "0",
            "precision_mode": mode,
            "enable_cann_graph": "1",
            "op_select_impl_mode": "high_performance",
            "npu_mem_limit": str(4096 * 1024 * 1024),
        },
    ), f"{precision} must map to CANN precision_mode {mode}, with the profile's mode and memory limit"
    assert [name for name, _ in providers] == ["CANNExecutionProvider", "CPUExecutionProvider"], "then CPU"


@pytest.mark.parametrize(
    ("device", "precision", "expected"), [("CPU", "fp32", "FP32"), ("GPU", "fp16", "FP16"), ("GPU", "fp32", "FP32")]
)
@pytest.mark.usefixtures("every_listed_provider_loads")
def test_provider_list_when_openvino_is_configured_passes_device_precision_and_cache_dir(
    device: str, precision: str, expected: str, tmp_path: Path
) -> None:
    # Given options naming an OpenVINO device
    options = ort_options({"type": "openvino", "device_type": device})

    # When they are mapped
    [(name, opts)] = provider_list(options, precision, tmp_path / "entry")  # type: ignore[arg-type]

    # Then OpenVINO gets the device, the precision and a model cache inside the entry
    assert name == "OpenVINOExecutionProvider"
    assert opts["device_type"] == device, "the profile's device must reach OpenVINO"
    assert opts["precision"] == expected, f"{precision} must map to OpenVINO precision {expected}"
    assert Path(opts["cache_dir"]).is_relative_to(tmp_path / "entry"), "OpenVINO's blobs must live in the entry"


@pytest.mark.usefixtures("every_listed_provider_loads")
@pytest.mark.parametrize("device", ["CPU", "GPU"])
def test_provider_list_when_openvino_builds_int8_passes_a_precision_openvino_accepts(
    device: str, tmp_path: Path
) -> None:
    # Given OpenVINO options and int8, which check_providers lets through for openvino
    options = ort_options({"type": "openvino", "device_type": device})

    # When they are mapped
    [(_, opts)] = provider_list(options, "int8", tmp_path)

    # Then the precision option is one the OpenVINO EP accepts (int8 comes from a QDQ model, not this option)
    assert opts.get("precision", "FP32") in {"FP32", "FP16", "ACCURACY"}, (
        f"OpenVINO must get a precision it accepts, got {opts.get('precision')!r}"
    )


@pytest.mark.usefixtures("every_listed_provider_loads")
@pytest.mark.parametrize(("threads", "expected"), [(0, {}), (2, {"intra_op_num_threads": "2"})])
def test_provider_list_when_xnnpack_is_configured_passes_its_thread_count(
    threads: int, expected: dict[str, str], tmp_path: Path
) -> None:
    # Given XNNPACK options
    options = ort_options({"type": "xnnpack", "threads": threads}, {"type": "cpu"})

    # When they are mapped
    providers = provider_list(options, "fp32", tmp_path)

    # Then XNNPACK gets its own thread count only when one is set, and CPU follows
    assert providers == [("XnnpackExecutionProvider", expected), ("CPUExecutionProvider", {})], (
        "threads=0 must let XNNPACK choose; a count must be passed as a string"
    )


def test_session_options_when_cpu_arena_is_off_disables_the_cpu_memory_arena() -> None:
    # Given a profile that turns the CPU memory arena off
    options = ort_options({"type": "cpu", "arena": False})

    # When its session options are made
    so = session_options(options, "all")

    # Then ONNX Runtime is told not to use the arena
    assert so.enable_cpu_mem_arena is False, "arena: false must disable ONNX Runtime's CPU memory arena"


def test_check_providers_when_tensorrt_is_missing_names_it_the_version_and_the_install_command(
    catalog: ProfileCatalog,
) -> None:
    # Given the Jetson DLA profile on a host whose onnxruntime has no TensorRT provider
    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has TensorRT; the missing-provider error cannot happen here")

    # When its providers are checked
    with pytest.raises(BackendUnavailableError) as raised:
        check_providers(catalog.load("jetson-orin-dla").engine, "fp16")

    # Then the error names the provider, the installed onnxruntime and how to get it
    message = str(raised.value)
    assert "'tensorrt'" in message, "the error must name the missing provider"
    assert onnxruntime.__version__ in message, "the error must name the installed onnxruntime version"
    assert "edge-sdk[cuda]" in message, "the error must say what to install"


def test_prepare_engine_when_provider_is_missing_fails_before_writing_to_the_cache(
    catalog: ProfileCatalog, demo_model: Path, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given the Jetson DLA profile on a host without TensorRT
    if "TensorrtExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has TensorRT; the missing-provider error cannot happen here")

    # When the detector is prepared with it
    with pytest.raises(BackendUnavailableError):
        prepare_engine(demo_model, catalog.load("jetson-orin-dla"), cache=engine_cache, facts=host_facts)

    # Then nothing was written into the cache
    assert not engine_cache.root.exists() or not any(engine_cache.root.iterdir()), "the cache must stay empty"


@pytest.mark.parametrize("precision", ["fp16"])
def test_prepare_engine_when_precision_is_not_in_the_profile_raises_config_error_naming_them(
    precision: str, cpu_profile: DeviceProfile, demo_model: Path, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given the x86 CPU profile, which builds fp32 only
    # When another precision is asked for
    with pytest.raises(ConfigError) as raised:
        prepare_engine(demo_model, cpu_profile, precision=precision, cache=engine_cache, facts=host_facts)  # type: ignore[arg-type]

    # Then the error names the profile's precisions and the one asked for
    message = str(raised.value)
    assert "fp32" in message, "the error must name the precisions the profile builds"
    assert precision in message, "the error must name the precision that was asked for"
    assert not engine_cache.root.exists(), "nothing must be written into the cache"


# --- Model files ONNX Runtime cannot use ----------------------------------------------------------------------


def _missing(tmp_path: Path, demo_model: Path) -> Path:
    return tmp_path / "no-such-model.onnx"


def _empty(tmp_path: Path, demo_model: Path) -> Path:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    return path


def _random_bytes(tmp_path: Path, demo_model: Path) -> Path:
    path = tmp_path / "random.onnx"
    path.write_bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


def _truncated(tmp_path: Path, demo_model: Path) -> Path:
    path = tmp_path / "truncated.onnx"
    data = demo_model.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _directory(tmp_path: Path, demo_model: Path) -> Path:
    path = tmp_path / "model-dir.onnx"
    path.mkdir()
    return path


def _decodes_but_invalid(tmp_path: Path, demo_model: Path) -> Path:
    """Valid protobuf, but onnx.checker rejects it: the node reads a tensor nothing defines."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["undefined"], ["y"])],
        "dangling_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = onnx_models.make_model(graph, 17)
    path = tmp_path / "dangling.onnx"
    onnx.save(model, str(path))
    return path


def cache_dirs(cache: EngineCache) -> list[str]:
    """Entries and staging dirs in the cache (lock files do not count)."""
    return sorted(p.name for p in cache.root.iterdir() if p.is_dir()) if cache.root.exists() else []


@pytest.mark.parametrize(
    "make_bad_model",
    [_missing, _empty, _random_bytes, _truncated, _directory, _decodes_but_invalid],
    ids=["missing", "empty", "random-bytes", "truncated", "directory", "decodes-but-invalid"],
)
def test_prepare_engine_when_model_file_is_unusable_raises_model_error_naming_it(
    make_bad_model: Any,
    tmp_path: Path,
    demo_model: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given a model path that is missing, empty, not ONNX, cut short, a directory or rejected by onnx.checker
    bad_model = make_bad_model(tmp_path, demo_model)

    # When an engine is prepared from it
    with pytest.raises(ModelError) as raised:
        prepare_engine(bad_model, cpu_profile, cache=engine_cache, facts=host_facts)

    # Then the error names the file and the cache is untouched
    assert str(bad_model) in str(raised.value), "the error must name the model file"
    assert "\n" not in str(raised.value), "the error must be one line the CLI can print"
    assert cache_dirs(engine_cache) == [], "a bad model must leave no entry or staging dir in the cache"


def test_prepare_engine_when_onnx_accepts_a_model_onnxruntime_cannot_build_raises_engine_build_error(
    tmp_path: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # Given a model that passes onnx.checker but uses an operator no ONNX Runtime provider implements
    graph = helper.make_graph(
        [helper.make_node("Nope", ["x"], ["y"], domain="com.example")],
        "unbuildable",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = save_checked(graph, tmp_path / "unbuildable.onnx", ("com.example", 1))

    # When an engine is prepared from it
    with pytest.raises(EngineBuildError) as raised:
        prepare_engine(model, cpu_profile, cache=engine_cache, facts=host_facts)

    # Then the error names the model and ONNX Runtime's reason, and no entry or staging dir is left
    message = str(raised.value)
    assert "unbuildable.onnx" in message, "the error must name the model"
    assert "Nope" in message, "the error must carry ONNX Runtime's reason (the unknown operator)"
    assert cache_dirs(engine_cache) == [], "a failed build must leave no entry or staging dir"


# --- Inputs checked before they reach ONNX Runtime ------------------------------------------------------------


@pytest.mark.parametrize(
    ("feed", "fragments"),
    [
        ({"images": np.zeros((1, 3, 8, 8), np.float64)}, ["expected dtype float32", "got float64"]),
        ({"images": np.zeros((3, 8, 8), np.float32)}, ["expected 4 dimensions", "got shape (3, 8, 8)"]),
        ({"images": np.zeros((1, 3, 9, 8), np.float32)}, ["expected size 8 on axis 2", "got shape (1, 3, 9, 8)"]),
        ({"pixels": np.zeros((1, 3, 8, 8), np.float32)}, ["expected inputs ['images']", "got ['pixels']"]),
        (
            {"images": np.zeros((1, 3, 8, 8), np.float32), "extra": np.zeros(1, np.float32)},
            ["expected inputs ['images']", "got ['extra', 'images']"],
        ),
    ],
    ids=["wrong-dtype", "wrong-rank", "wrong-fixed-dim", "wrong-name", "extra-input"],
)
def test_runner_infer_when_input_does_not_fit_raises_model_error_saying_expected_and_got(
    feed: dict[str, np.ndarray],
    fragments: list[str],
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given the float classifier engine, which takes images: float32[N, 3, 8, 8]
    prepared = prepare_engine(tiny_models["float_classifier"], cpu_profile, cache=engine_cache, facts=host_facts)

    # When it is fed an input that does not fit
    with prepared.open() as runner, pytest.raises(ModelError) as raised:
        runner.infer(feed)

    # Then the error says what was expected and what came
    for fragment in fragments:
        assert fragment in str(raised.value), f"the error must say '{fragment}'"


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        np.float16,
        np.uint8,
        np.int8,
        np.int32,
        np.int64,
        np.int16,
        np.uint16,
        np.uint32,
        np.uint64,
    ],
    ids=lambda d: np.dtype(d).name,
)
def test_runner_when_model_input_has_dtype_reports_and_accepts_that_dtype(
    dtype: type[np.generic],
    tmp_path: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    host_facts: HostFacts,
) -> None:
    # Given an Identity model whose input has this dtype
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = identity_model(tmp_path / f"identity_{np.dtype(dtype).name}.onnx", elem_type)
    prepared = prepare_engine(model, cpu_profile, cache=engine_cache, facts=host_facts)
    values = np.arange(8, dtype=dtype).reshape(2, 4)

    # When it is opened and fed an array of that dtype
    with prepared.open() as runner:
        reported = runner.inputs[0].dtype
        outputs = runner.infer({"x": values})

    # Then the runner reports the model's dtype and passes the values through
    assert reported == np.dtype(dtype), f"the runner must report the input as {np.dtype(dtype).name}"
    np.testing.assert_array_equal(outputs["y"], values, err_msg="Identity must return its input")
