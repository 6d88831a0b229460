"""Profile options of the TensorRT backend: the builder's settings and how engines are run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..backend import BackendOptions

MAX_DEVICE_INDEX = 63
MAX_DLA_CORE = 7
"""Largest DLA core index (Jetson AGX Orin has cores 0 and 1)."""
MAX_WORKSPACE_MB = 65536
"""Largest workspace: 64 GiB, the memory of the largest Jetson."""
CudaLibrary = Literal["auto", "cuda-python", "pycuda"]


class TensorRTOptions(BackendOptions):
    backend: Literal["tensorrt"] = Field(description="Build and run engines with TensorRT's own API.")
    device_id: int = Field(0, ge=0, le=MAX_DEVICE_INDEX, strict=True, description="GPU index.")
    dla_core: int | None = Field(
        None,
        ge=0,
        le=MAX_DLA_CORE,
        strict=True,
        description=f"Build for this DLA core (Jetson), 0..{MAX_DLA_CORE}; null = the GPU.",
    )
    gpu_fallback: bool = Field(
        True,
        description="On DLA, let layers the DLA cannot run fall back to the GPU (the placement report lists "
        "them); false = the build fails on the first such layer.",
    )
    min_dla_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="On DLA, the least share of the network's layers that must run on the DLA; a build "
        "below it fails with the placement report. 0 = no minimum.",
    )
    workspace_mb: int = Field(
        1024, ge=1, le=MAX_WORKSPACE_MB, strict=True, description="Builder workspace memory-pool limit, MiB."
    )
    optimization_level: int = Field(
        3,
        ge=0,
        le=5,
        strict=True,
        description="Builder optimisation level 0..5 (TensorRT's default 3). 5 searches longest: builds "
        "have been reported at 30-44 minutes on Orin.",
    )
    opt_batch: int = Field(
        1,
        ge=1,
        le=1024,
        strict=True,
        description="For a dynamic batch axis: the batch size the builder tunes for (the optimisation "
        "profile's opt); min is 1.",
    )
    max_batch: int = Field(
        8,
        ge=1,
        le=1024,
        strict=True,
        description="For a dynamic batch axis: the largest batch the engine takes (the profile's max).",
    )
    timing_cache: bool = Field(
        True, description="Keep TensorRT's timing cache per device and TensorRT version, so rebuilds are fast."
    )
    cuda: CudaLibrary = Field(
        "auto",
        description="Which Python binding of CUDA the runner uses: cuda-python (NVIDIA's current samples), "
        "pycuda, or auto (cuda-python, else pycuda).",
    )
    cuda_graph: bool = Field(
        False,
        description="Capture each static-shape call as a CUDA graph once and replay it (less launch "
        "overhead); dynamic shapes run without.",
    )
    zero_copy_frames: bool = Field(
        False,
        description="Jetson (shared DRAM): register host input arrays, such as the pipeline's frame ring, "
        "as mapped page-locked memory so the engine reads them without a copy.",
    )
    strongly_typed: bool | Literal["auto"] = Field(
        "auto",
        description="Build a strongly typed network (precision from the ONNX model itself). auto = on "
        "TensorRT 11, where it is the only kind, off on 10.",
    )

    @model_validator(mode="after")
    def _dla_options_need_a_core(self) -> TensorRTOptions:
        if self.dla_core is None and self.min_dla_share > 0:
            raise ValueError("min_dla_share needs dla_core (the share of layers on the DLA)")
        if self.opt_batch > self.max_batch:
            raise ValueError(f"opt_batch {self.opt_batch} is larger than max_batch {self.max_batch}")
        return self
