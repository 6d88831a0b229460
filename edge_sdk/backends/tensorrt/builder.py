"""Build: ONNX model -> a TensorRT engine plan, with TensorRT's builder API (build_plan.py says what it
asks for). Writes the plan, the SDK's header (engine_file.py) and, for DLA, the placement report."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sdk.core.errors import ConfigError, EngineBuildError
from edge_sdk.core.host import HostProbe
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision
from edge_sdk.core.tensor_meta import TensorMeta

from ..backend import BuildFacts, EngineBuilder
from .build_log import make_logger
from .build_plan import DLA_PRECISIONS, BuildPlan, make_build_plan
from .build_progress import BuildClock, make_progress_monitor
from .cuda_runtime import open_cuda
from .engine_file import HEADER, PLAN, EngineHeader, EngineTarget
from .library import import_tensorrt, installed_version
from .onnx_parsing import problems_paragraph, read_parser_problems
from .options import TensorRTOptions
from .placement import PlacementReport, engine_layers, fallback_reasons, network_layers, tagged_engine_layers
from .timing_cache import default_timing_dir, read_bytes, timing_cache_path, write_atomically

if TYPE_CHECKING:
    from ..calibration.settings import Calibration

log = logging.getLogger(__name__)

BUILD_FORMAT = 1
"""Bumped when the builder writes a different engine for the same key; part of version(), so of the key."""
FP16_MODEL = "model.fp16.onnx"
INT8_MODEL = "model.int8.onnx"


class TensorRTBuilder(EngineBuilder):
    def version(self) -> str:
        return f"{import_tensorrt().__version__}+sdk{BUILD_FORMAT}"

    def check(self, options: TensorRTOptions, precision: Precision) -> None:
        trt = import_tensorrt()
        open_cuda(options.cuda, options.device_id)
        if options.dla_core is None:
            return
        if precision not in DLA_PRECISIONS:
            raise ConfigError(f"the DLA runs fp16 and int8 only; got precision {precision}")
        board = HostProbe().facts().device_tree_model or ""
        if problem := installed_version(trt).dla_problem(board):
            raise ConfigError(f"cannot build for DLA core {options.dla_core}: {problem}; use the GPU profile")
        cores = trt.Builder(make_logger(trt)).num_DLA_cores
        if options.dla_core >= cores:
            raise ConfigError(f"DLA core {options.dla_core} does not exist: this device has {cores} DLA cores")

    def build(
        self,
        model: ModelFile,
        options: TensorRTOptions,
        precision: Precision,
        out_dir: Path,
        calibration: Calibration | None,
    ) -> BuildFacts:
        trt = import_tensorrt()
        version = installed_version(trt)
        plan = make_build_plan(options, precision, version, model.inputs)
        for note in plan.notes:
            log.info("tensorrt build: %s", note)
        cuda = open_cuda(options.cuda, options.device_id)
        device = cuda.device()
        facts: dict[str, Any] = {"build_plan": plan.to_dict(), "cuda": cuda.name}
        source = model.path
        if plan.fp16_route == "fp16_graph":  # strongly typed: the graph itself says fp16 (the same conversion as ORT's)
            from ..onnxruntime.builder import write_fp16_graph

            source = out_dir / FP16_MODEL
            facts["fp16"] = write_fp16_graph(model.path, source)
        if plan.int8_route == "qdq_model":
            source = out_dir / INT8_MODEL
            facts["int8"] = _write_qdq_model(model, _require(calibration), source)

        logger = make_logger(trt)
        builder = trt.Builder(logger)
        network = builder.create_network(_flag_bits(trt.NetworkDefinitionCreationFlag, plan.network_flags))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(source)):
            nodes = _node_names(source)
            raise EngineBuildError(problems_paragraph(model.path.name, read_parser_problems(parser, version, nodes)))
        config = _builder_config(trt, builder, plan)
        timing_path = timing_cache_path(
            default_timing_dir(), str(version), device.name, _capability(device.compute_capability), plan.dla_core
        )
        if plan.timing_cache:
            cache = config.create_timing_cache(read_bytes(timing_path))
            config.set_timing_cache(cache, False)
        calibrator = None
        if plan.int8_route == "calibrator":
            calibrator = _attach_calibrator(trt, builder, config, _require(calibration), model, plan, cuda, timing_path)
        clock = BuildClock()
        if plan.progress_monitor:
            config.progress_monitor = make_progress_monitor(trt, clock)
        # where each network layer can go, asked before the build consumes the network
        layers = (
            []
            if plan.dla_core is None
            else [(layer.name, layer.type.name, config.can_run_on_DLA(layer)) for layer in _layers(network)]
        )
        try:
            serialized = builder.build_serialized_network(network, config)
        finally:
            if calibrator is not None:
                calibrator.free()
        if serialized is None:
            raise EngineBuildError(
                f"TensorRT could not build {model.path.name}: {'; '.join(logger.errors()) or 'see the log'}"
            )
        facts["build_seconds"] = round(clock.elapsed(), 3)
        if plan.timing_cache:
            write_atomically(timing_path, bytes(config.get_timing_cache().serialize()))
            facts["timing_cache"] = str(timing_path)
        (out_dir / PLAN).write_bytes(bytes(serialized))

        runtime = trt.Runtime(logger)
        if plan.dla_core is not None:
            runtime.DLA_core = plan.dla_core
        engine = runtime.deserialize_cuda_engine(bytes(serialized))
        if engine is None:
            raise EngineBuildError(f"TensorRT built {model.path.name} but cannot load the plan it wrote")
        if plan.dla_core is not None:
            report = _placement_report(trt, engine, plan.dla_core, layers, logger.lines)
            facts["dla_placement"] = report.to_dict()
            report.check_share(plan.min_dla_share)
        target = EngineTarget(
            str(trt.__version__),
            device.name,
            _capability(device.compute_capability),
            plan.dla_core,
            HostProbe().facts().device_tree_model,
        )
        outputs = _engine_outputs(trt, engine)
        EngineHeader(target, precision, plan.to_dict(), _engine_inputs(model, source), outputs).write(out_dir)
        facts["target"] = target.describe()
        facts["files"] = [PLAN, HEADER]
        return facts


def _builder_config(trt: Any, builder: Any, plan: BuildPlan) -> Any:
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, plan.workspace_bytes)
    if plan.optimization_level is not None:
        config.builder_optimization_level = plan.optimization_level
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # the inspector then lists every layer
    for flag in plan.builder_flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    if plan.default_device == "DLA":
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = plan.dla_core
    if plan.shape_ranges:
        profile = builder.create_optimization_profile()
        for shape_range in plan.shape_ranges:
            profile.set_shape(shape_range.name, shape_range.min, shape_range.opt, shape_range.max)
        config.add_optimization_profile(profile)
    return config


def _placement_report(
    trt: Any, engine: Any, dla_core: int, layers: list[tuple[str, str, bool]], log_lines: list[str]
) -> PlacementReport:
    """Where the layers went: the network's per-layer check and the log's fallbacks, and the engine's layers
    from the inspector (ProfilingVerbosity.DETAILED) with the log's DLA/GPU tags (placement.py)."""
    inspector_json = engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)
    report = PlacementReport(
        dla_core,
        network_layers(layers, fallback_reasons(log_lines)),
        engine_layers(inspector_json, tagged_engine_layers(log_lines)),
    )
    for line in report.lines():
        log.info("DLA placement: %s", line)
    return report


def _attach_calibrator(
    trt: Any,
    builder: Any,
    config: Any,
    calibration: Calibration,
    model: ModelFile,
    plan: BuildPlan,
    cuda: Any,
    timing_path: Path,
) -> Any:
    """The entropy calibrator on the calibration data, in batches of the tuned-for size. Its accuracy is
    judged afterwards like every engine's: prepare_engine's gate runs the built engine against FP32 with
    the INT8 settings' limits."""
    from ..calibration.reader import SampleSet
    from .calibration_batches import CalibrationBatches
    from .calibrator import make_entropy_calibrator

    samples = SampleSet.from_reader(calibration.reader, model.inputs, calibration.settings.max_samples)
    batch = plan.shape_ranges[0].opt[0] if plan.shape_ranges else 1
    batches = CalibrationBatches(samples.samples, batch)
    cache_path = timing_path.with_name(f"calibration-{model.sha256[:16]}-{calibration.fingerprint()[:16]}.cache")
    calibrator = make_entropy_calibrator(trt, batches, cuda, cache_path)
    config.int8_calibrator = calibrator
    if plan.shape_ranges:  # a dynamic network calibrates at one shape, given by its own profile
        profile = builder.create_optimization_profile()
        for shape_range in plan.shape_ranges:
            shape = (batch, *shape_range.opt[1:])
            profile.set_shape(shape_range.name, shape, shape, shape)
        config.set_calibration_profile(profile)
    log.info("int8: calibrating with %d batches of %d (%d samples left out)", len(batches), batch, batches.left_out)
    return calibrator


def _write_qdq_model(model: ModelFile, calibration: Calibration, destination: Path) -> dict[str, Any]:
    """The Q/DQ model TensorRT 11 builds INT8 from: the SDK's own quantiser (the CPU INT8 path) with
    TensorRT's needs (signed, symmetric activations; no reduced range), through the same accuracy gate."""
    from ..onnxruntime.int8 import build_int8_model
    from ..onnxruntime.options import OnnxRuntimeOptions

    settings = calibration.settings.model_copy(
        update={"activation_type": "int8", "activation_symmetric": True, "reduce_range": False}
    )
    return build_int8_model(
        model, replace(calibration, settings=settings), OnnxRuntimeOptions(backend="onnxruntime"), destination
    )


def _require(calibration: Calibration | None) -> Calibration:
    if calibration is None:
        raise ConfigError("precision int8 needs calibration data (edge-sdk build --calib DATA)")
    return calibration


def _flag_bits(enum: Any, names: tuple[str, ...]) -> int:
    bits = 0
    for name in names:
        bits |= 1 << int(getattr(enum, name))
    return bits


def _layers(network: Any) -> list[Any]:
    return [network.get_layer(index) for index in range(network.num_layers)]


def _capability(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def _node_names(path: Path) -> list[tuple[str, str]]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [(node.name, node.op_type) for node in graph.node]


def _engine_inputs(model: ModelFile, source: Path) -> tuple[TensorMeta, ...]:
    return ModelFile.load(source).inputs if source != model.path else model.inputs


def _engine_outputs(trt: Any, engine: Any) -> tuple[TensorMeta, ...]:
    from .engine_io import numpy_dtype

    outputs = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            shape = tuple(int(d) if d >= 0 else None for d in engine.get_tensor_shape(name))
            outputs.append(TensorMeta(name, numpy_dtype(engine.get_tensor_dtype(name).name, name), shape))
    return tuple(outputs)
