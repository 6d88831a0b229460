"""Profile options of the ONNX Runtime backend: which execution providers, in which order, how."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edge_sdk.core.precision import Precision

from ..backend import BackendOptions

MAX_THREADS = 256
"""Largest thread count an option may ask for (more than any edge box has cores)."""
MAX_DEVICE_INDEX = 63
"""Largest GPU or NPU index."""
MAX_DLA_CORE = 7
"""Largest DLA core index (Jetson AGX Orin and Xavier have cores 0 and 1)."""
MAX_WORKSPACE_MB = 65536
"""Largest TensorRT workspace: 64 GiB, the memory of the largest Jetson."""


AUTO_GPU_SHAPE_SESSIONS = 8
"""Shape sessions a CUDA engine keeps by default: the batch sizes a serving batcher runs (1, 2, 4 ... 32)
and a few more."""
MAX_SHAPE_SESSIONS = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuProvider(_Strict):
    type: Literal["cpu"] = Field(description="ONNX Runtime's default CPU execution provider.")
    arena: bool = Field(True, description="Use the CPU memory arena (faster, holds memory).")

    ort_name: ClassVar[str] = "CPUExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        return {}


class XnnpackProvider(_Strict):
    type: Literal["xnnpack"] = Field(description="XNNPACK, fast float kernels on ARM CPUs.")
    threads: int = Field(
        0,
        ge=0,
        le=MAX_THREADS,
        strict=True,
        description=f"XNNPACK's own thread pool size, 0..{MAX_THREADS}; 0 lets it choose.",
    )

    ort_name: ClassVar[str] = "XnnpackExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        return {"intra_op_num_threads": str(self.threads)} if self.threads else {}


class CudaProvider(_Strict):
    type: Literal["cuda"] = Field(description="NVIDIA CUDA execution provider.")
    device_id: int = Field(0, ge=0, le=MAX_DEVICE_INDEX, strict=True, description=f"GPU index, 0..{MAX_DEVICE_INDEX}.")
    cuda_graph: bool | Literal["auto"] = Field(
        False,
        description="Replay each run as a CUDA graph (ONNX Runtime's enable_cuda_graph), captured once per input "
        "shape and input buffer: far less launch overhead per call. Needs every node of the engine on CUDA and "
        "no Loop/If/Scan, and io_binding: auto. true = refuse an engine that cannot (one error line), "
        "'auto' = use graphs where the engine allows, false = never.",
    )

    @field_validator("cuda_graph", mode="before")
    @classmethod
    def _true_false_or_auto(cls, value: object) -> object:
        if value is True or value is False or value == "auto":
            return value
        raise ValueError("expected true, false or 'auto'")

    prefer_nhwc: bool = Field(
        False,
        description="Run convolutions in NHWC layout (ONNX Runtime's prefer_nhwc), the layout tensor cores take; "
        "ONNX Runtime transposes the model's NCHW input once. On the H200 a ResNet-18-sized CNN ran 34% faster in "
        "fp16 at batch 256, and the demo detector's split engine slower at batch 1 (docs/benchmarks.md).",
    )

    conv_algo_search: Literal["exhaustive", "heuristic", "default"] = Field(
        "exhaustive",
        description="How cuDNN picks each convolution's algorithm (ONNX Runtime's cudnn_conv_algo_search): "
        "exhaustive times them all, once per input shape (the fastest kernels, but every new shape, such as a "
        "batch size met for the first time, costs that search: up to seconds); heuristic asks cuDNN's "
        "heuristics (cheap for every shape); default takes one fixed algorithm.",
    )

    ort_name: ClassVar[str] = "CUDAExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        return {"device_id": str(self.device_id)}

    def run_options(self) -> dict[str, str]:
        """Options for the sessions that run the engine, not the one that builds it: the build saves a
        layout-neutral graph, and ONNX Runtime lays it out for NHWC when a session loads it."""
        options = {"prefer_nhwc": "1"} if self.prefer_nhwc else {}
        if self.conv_algo_search != "exhaustive":  # ONNX Runtime's own default
            options["cudnn_conv_algo_search"] = self.conv_algo_search.upper()
        return options


class TensorRTProvider(_Strict):
    type: Literal["tensorrt"] = Field(description="NVIDIA TensorRT execution provider (GPU or DLA).")
    device_id: int = Field(0, ge=0, le=MAX_DEVICE_INDEX, strict=True, description=f"GPU index, 0..{MAX_DEVICE_INDEX}.")
    dla_core: int | None = Field(
        None,
        ge=0,
        le=MAX_DLA_CORE,
        strict=True,
        description=f"Run on this DLA core (Jetson), 0..{MAX_DLA_CORE}; None = GPU.",
    )
    workspace_mb: int = Field(
        1024,
        ge=1,
        le=MAX_WORKSPACE_MB,
        strict=True,
        description=f"TensorRT builder workspace limit in MiB, 1..{MAX_WORKSPACE_MB}.",
    )

    ort_name: ClassVar[str] = "TensorrtExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        options: dict[str, Any] = {
            "device_id": str(self.device_id),
            "trt_max_workspace_size": str(self.workspace_mb * 1024 * 1024),
            "trt_fp16_enable": str(precision in ("fp16", "int8")),
            "trt_int8_enable": str(precision == "int8"),
            # TensorRT's own engines live inside our cache entry, so they share its key.
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": cache_dir,
            "trt_timing_cache_enable": "True",
        }
        if self.dla_core is not None:
            options |= {"trt_dla_enable": "True", "trt_dla_core": str(self.dla_core)}
        return options


class CannProvider(_Strict):
    """Huawei's CANN execution provider (onnxruntime-cann); its options as ONNX Runtime's CANN page lists them."""

    type: Literal["cann"] = Field(description="Huawei CANN execution provider (Ascend NPU).")
    device_id: int = Field(0, ge=0, le=MAX_DEVICE_INDEX, strict=True, description=f"NPU index, 0..{MAX_DEVICE_INDEX}.")
    precision_mode: Literal[
        "auto", "force_fp32", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype", "allow_mix_precision"
    ] = Field(
        "auto",
        description="CANN's operator precision mode; auto = force_fp16 for fp16 engines, force_fp32 otherwise.",
    )
    op_select_impl_mode: Literal["high_precision", "high_performance"] | None = Field(
        None, description="CANN's operator implementation mode; null = CANN's default."
    )
    memory_limit_mb: int | None = Field(
        None, ge=1, le=MAX_WORKSPACE_MB, strict=True, description="Limit of the provider's device memory arena, MiB."
    )
    cann_graph: bool = Field(True, description="Run the model through CANN's graph engine where it can.")

    ort_name: ClassVar[str] = "CANNExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        mode = self.precision_mode
        if mode == "auto":
            mode = "force_fp16" if precision == "fp16" else "force_fp32"
        options = {
            "device_id": str(self.device_id),
            "precision_mode": mode,
            "enable_cann_graph": str(int(self.cann_graph)),
        }
        if self.op_select_impl_mode is not None:
            options["op_select_impl_mode"] = self.op_select_impl_mode
        if self.memory_limit_mb is not None:
            options["npu_mem_limit"] = str(self.memory_limit_mb * 1024 * 1024)
        return options


class OpenVinoProvider(_Strict):
    type: Literal["openvino"] = Field(description="Intel OpenVINO execution provider.")
    device_type: str = Field("CPU", description="OpenVINO device: CPU, GPU, NPU or AUTO:... .")

    ort_name: ClassVar[str] = "OpenVINOExecutionProvider"

    def ort_options(self, precision: Precision, cache_dir: str) -> dict[str, Any]:
        # OpenVINO takes FP32, FP16 or ACCURACY; an int8 model carries its own (QDQ) quantisation.
        mode = {"fp32": "FP32", "fp16": "FP16", "int8": "ACCURACY"}[precision]
        return {"device_type": self.device_type, "precision": mode, "cache_dir": cache_dir}


ExecutionProvider = Annotated[
    CpuProvider | XnnpackProvider | CudaProvider | TensorRTProvider | CannProvider | OpenVinoProvider,
    Field(discriminator="type"),
]

INSTALL_HINTS: dict[str, str] = {
    "cpu": "pip install 'edge-sdk[cpu]'",
    "xnnpack": "an onnxruntime built with --use_xnnpack (PyPI's wheels, x86 and aarch64, have none); or drop "
    "xnnpack from the profile",
    "cuda": "pip install 'edge-sdk[cuda]' (on Jetson: NVIDIA's onnxruntime-gpu wheel for your JetPack)",
    "tensorrt": "pip install 'edge-sdk[cuda]' with TensorRT installed (on Jetson: JetPack's TensorRT)",
    "cann": "pip install 'edge-sdk[atlas]' with the Ascend CANN toolkit installed",
    "openvino": "pip install 'edge-sdk[openvino]'",
}


def _cpu_only() -> list[ExecutionProvider]:
    return [CpuProvider(type="cpu")]


class OnnxRuntimeOptions(BackendOptions):
    backend: Literal["onnxruntime"] = Field(description="Run engines with ONNX Runtime.")
    execution_providers: list[ExecutionProvider] = Field(
        default_factory=_cpu_only,
        min_length=1,
        description="Providers in priority order; ONNX Runtime puts each node on the first that takes it.",
    )
    intra_op_threads: int = Field(
        0,
        ge=0,
        le=MAX_THREADS,
        strict=True,
        description=f"Threads inside one operator, 0..{MAX_THREADS}; 0 = one per core.",
    )
    inter_op_threads: int = Field(
        1,
        ge=1,
        le=MAX_THREADS,
        strict=True,
        description=f"Operators run in parallel, 1..{MAX_THREADS}; >1 enables parallel mode.",
    )
    allow_spinning: bool = Field(
        True,
        description="Let idle ONNX Runtime threads busy-wait: lowest latency when inference has the CPU to "
        "itself; the multi-process runtime turns it off so waiting threads do not starve the other stages.",
    )
    graph_optimization: Literal["basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime graph optimisation level applied once at build time."
    )
    io_binding: Literal["auto", "off"] = Field(
        "auto",
        description="How a GPU engine is fed: 'auto' gives sessions whose first provider is CUDA or TensorRT "
        "ONNX Runtime's I/O binding for inputs already on the GPU (an onnxruntime.OrtValue or any "
        "__cuda_array_interface__ array, bound without a copy), for page-locked host arrays (pinned_empty) and for "
        "CUDA graphs (device input buffers kept per input shape); other numpy inputs go through session.run, "
        "which measured as fast. 'off' = "
        "session.run only. CPU sessions always use session.run.",
    )

    shape_sessions: Annotated[int, Field(strict=True)] | Literal["auto"] = Field(
        "auto",
        description=f"Sessions an engine keeps, one per input shape it meets (the least recently used closes "
        f"past this many), so no session ever changes shape: on ONNX Runtime's CUDA provider each change cost "
        f"28 ms (a ResNet-18-sized CNN) to 2 s (the demo detector) on an H100, every time, even back to a shape "
        f"run before (docs/benchmarks.md, 'Adaptive batching'). Each session holds its own weights in device "
        f"memory. 'auto' = {AUTO_GPU_SHAPE_SESSIONS} when the first provider is CUDA, else 1 (one session for "
        f"every shape); 1..{MAX_SHAPE_SESSIONS}.",
    )

    @field_validator("shape_sessions")
    @classmethod
    def _sessions_in_range(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_SHAPE_SESSIONS:
            raise ValueError(f"expected 1..{MAX_SHAPE_SESSIONS} or 'auto', got {value}")
        return value

    def sessions_per_engine(self, first_provider: str) -> int:
        """How many shape sessions a runner whose session runs first on `first_provider` keeps."""
        if self.shape_sessions != "auto":
            return self.shape_sessions
        return AUTO_GPU_SHAPE_SESSIONS if first_provider == CudaProvider.ort_name else 1

    @field_validator("io_binding", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @model_validator(mode="after")
    def _cuda_graph_needs_io_binding(self) -> OnnxRuntimeOptions:
        if self.io_binding == "off" and any(
            isinstance(p, CudaProvider) and p.cuda_graph is True for p in self.execution_providers
        ):
            raise ValueError("cuda_graph: true needs io_binding: auto (CUDA graphs replay fixed device buffers)")
        return self
