"""Every TensorRT Python name this backend uses, with the versions it uses it in: [since, until). The
branches of versions.py decide the ranges; tests/backends/tensorrt/test_api_surface.py checks each name
against the names in PyPI's bindings wheels of 8.6, 10.3, 10.13, 10.16 and 11.4 (tools/tensorrt_names),
and that every attribute the TensorRT-facing modules read of TensorRT objects is declared here."""

from __future__ import annotations

Version = tuple[int, int]
ALWAYS: tuple[Version | None, Version | None] = (None, None)
UNTIL_11: tuple[Version | None, Version | None] = (None, (11, 0))
FROM_10: tuple[Version | None, Version | None] = ((10, 0), None)

USED: dict[str, tuple[Version | None, Version | None]] = {
    # module (tensorrt.__version__ is set by the tensorrt package's own __init__, not the bindings), builder,
    # network, parser
    "Builder": ALWAYS,
    "create_network": ALWAYS,
    "create_builder_config": ALWAYS,
    "create_optimization_profile": ALWAYS,
    "build_serialized_network": ALWAYS,
    "num_DLA_cores": ALWAYS,
    "NetworkDefinitionCreationFlag": ALWAYS,
    "EXPLICIT_BATCH": UNTIL_11,
    "STRONGLY_TYPED": ((9, 1), None),
    "OnnxParser": ALWAYS,
    "parse_from_file": ALWAYS,
    "num_errors": ALWAYS,
    "get_error": ALWAYS,
    "code": ALWAYS,
    "desc": ALWAYS,
    "node": ALWAYS,
    "node_name": FROM_10,
    "node_operator": FROM_10,
    "num_layers": ALWAYS,
    "get_layer": ALWAYS,
    "name": ALWAYS,
    "type": ALWAYS,
    # builder config
    "set_memory_pool_limit": ALWAYS,
    "MemoryPoolType": ALWAYS,
    "WORKSPACE": ALWAYS,
    "builder_optimization_level": ((8, 6), None),
    "profiling_verbosity": ALWAYS,
    "ProfilingVerbosity": ALWAYS,
    "DETAILED": ALWAYS,
    "set_flag": ALWAYS,
    "BuilderFlag": ALWAYS,
    "FP16": UNTIL_11,
    "INT8": UNTIL_11,
    "GPU_FALLBACK": ALWAYS,
    "default_device_type": ALWAYS,
    "DeviceType": ALWAYS,
    "DLA": ALWAYS,
    "DLA_core": ALWAYS,
    "set_shape": ALWAYS,
    "add_optimization_profile": ALWAYS,
    "create_timing_cache": ALWAYS,
    "set_timing_cache": ALWAYS,
    "get_timing_cache": ALWAYS,
    "serialize": ALWAYS,
    "can_run_on_DLA": ALWAYS,
    "int8_calibrator": UNTIL_11,
    "set_calibration_profile": UNTIL_11,
    "IInt8EntropyCalibrator2": UNTIL_11,
    "get_batch_size": UNTIL_11,
    "get_batch": UNTIL_11,
    "read_calibration_cache": UNTIL_11,
    "write_calibration_cache": UNTIL_11,
    "progress_monitor": FROM_10,
    "IProgressMonitor": FROM_10,
    "phase_start": FROM_10,
    "step_complete": FROM_10,
    "phase_finish": FROM_10,
    "ILogger": ALWAYS,
    "log": ALWAYS,
    "INTERNAL_ERROR": ALWAYS,
    "ERROR": ALWAYS,
    "WARNING": ALWAYS,
    # runtime, engine, inspector, execution context
    "Runtime": ALWAYS,
    "deserialize_cuda_engine": ALWAYS,
    "create_engine_inspector": ALWAYS,
    "get_engine_information": ALWAYS,
    "LayerInformationFormat": ALWAYS,
    "JSON": ALWAYS,
    "num_io_tensors": ALWAYS,
    "get_tensor_name": ALWAYS,
    "get_tensor_mode": ALWAYS,
    "TensorIOMode": ALWAYS,
    "INPUT": ALWAYS,
    "OUTPUT": ALWAYS,
    "get_tensor_shape": ALWAYS,
    "get_tensor_dtype": ALWAYS,
    "get_tensor_profile_shape": ALWAYS,
    "create_execution_context": ALWAYS,
    "set_input_shape": ALWAYS,
    "set_tensor_address": ALWAYS,
    "execute_async_v3": ALWAYS,
    # DataType member names engine_io.py maps to numpy
    "FLOAT": ALWAYS,
    "HALF": ALWAYS,
    "UINT8": ALWAYS,
    "INT32": ALWAYS,
    "INT64": FROM_10,
    "BOOL": ALWAYS,
}

GONE_IN_11 = ("FP16", "EXPLICIT_BATCH", "IInt8EntropyCalibrator2", "int8_calibrator", "set_calibration_profile")
"""Names whose removal in TensorRT 11 the backend branches on (INT8 is left out: DataType.INT8 stays)."""

TENSORRT_OBJECTS = frozenset(
    {
        "trt",
        "builder",
        "network",
        "parser",
        "config",
        "profile",
        "engine",
        "context",
        "runtime",
        "error",
        "layer",
        "severity",
        "cache",
        "inspector",
    }
)
"""Names the TensorRT-facing modules give TensorRT objects (also as `self.<name>`): what they read of these
is TensorRT's API."""
TENSORRT_MODULES = (
    "builder.py",
    "trt_execution.py",
    "runner.py",
    "calibrator.py",
    "build_log.py",
    "build_progress.py",
    "onnx_parsing.py",
    "library.py",
)
