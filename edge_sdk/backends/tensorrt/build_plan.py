"""What a TensorRT build will ask of the builder, as plain data: made from the profile's options, the
precision, the installed TensorRT's generation and the model's inputs. The builder (builder.py) only
applies it, so every rule here is tested without TensorRT and lands in the engine's manifest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.precision import Precision
from edge_sdk.core.tensor_meta import TensorMeta

from .options import TensorRTOptions
from .versions import TensorRTVersion

MIB = 1024 * 1024
DLA_PRECISIONS = frozenset({"fp16", "int8"})
"""The DLA runs FP16 and INT8 layers only (TensorRT developer guide, "Working with DLA")."""


@dataclass(frozen=True)
class ShapeRange:
    """One input's optimisation profile: the smallest, the tuned-for and the largest shape."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class BuildPlan:
    tensorrt_version: str
    precision: Precision
    network_flags: tuple[str, ...]
    """NetworkDefinitionCreationFlag member names."""
    builder_flags: tuple[str, ...]
    """BuilderFlag member names."""
    default_device: Literal["GPU", "DLA"]
    dla_core: int | None
    min_dla_share: float
    workspace_bytes: int
    optimization_level: int | None
    """None where this TensorRT has no optimisation level (before 8.6)."""
    shape_ranges: tuple[ShapeRange, ...]
    """Empty for static shapes: no optimisation profile is added."""
    fp16_route: Literal["builder_flag", "fp16_graph"] | None
    int8_route: Literal["calibrator", "qdq_model"] | None
    timing_cache: bool
    progress_monitor: bool
    notes: tuple[str, ...]
    """What the plan changed or dropped from the options for this TensorRT, one line each."""

    @property
    def strongly_typed(self) -> bool:
        return "STRONGLY_TYPED" in self.network_flags

    @property
    def static_shapes(self) -> bool:
        return not self.shape_ranges

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_build_plan(
    options: TensorRTOptions, precision: Precision, version: TensorRTVersion, inputs: Sequence[TensorMeta]
) -> BuildPlan:
    """The builder's settings for these options on this TensorRT; ConfigError for what cannot be built."""
    notes: list[str] = []
    strongly_typed = _strongly_typed(options, version)
    network_flags = (("EXPLICIT_BATCH",) if version.needs_explicit_batch_flag else ()) + (
        ("STRONGLY_TYPED",) if strongly_typed else ()
    )
    flags: list[str] = []
    fp16_route: Literal["builder_flag", "fp16_graph"] | None = None
    int8_route: Literal["calibrator", "qdq_model"] | None = None
    if precision in ("fp16", "int8") and not strongly_typed:
        flags.append("FP16")  # int8 engines keep the layers without int8 kernels in fp16
        fp16_route = "builder_flag"
    elif precision == "fp16":
        fp16_route = "fp16_graph"
    if precision == "int8":
        if strongly_typed:
            int8_route = "qdq_model"
        else:
            flags.append("INT8")
            int8_route = "calibrator" if version.has_int8_calibrators else "qdq_model"
            if version.calibrators_deprecated:
                notes.append(f"INT8 calibrators are deprecated since TensorRT 10.1 ({version} still has them)")
    if flags and version.precision_flags_deprecated:
        notes.append(f"the FP16/INT8 builder flags are deprecated since TensorRT 10.12 ({version} still has them)")
    if options.dla_core is not None:
        if precision not in DLA_PRECISIONS:
            raise ConfigError(f"the DLA runs fp16 and int8 only; got precision {precision}")
        if options.gpu_fallback:
            flags.append("GPU_FALLBACK")
    level: int | None = options.optimization_level
    if not version.has_optimization_level:
        notes.append(f"TensorRT {version} has no builder optimisation level; level {level} is not applied")
        level = None
    return BuildPlan(
        tensorrt_version=str(version),
        precision=precision,
        network_flags=network_flags,
        builder_flags=tuple(flags),
        default_device="DLA" if options.dla_core is not None else "GPU",
        dla_core=options.dla_core,
        min_dla_share=options.min_dla_share,
        workspace_bytes=options.workspace_mb * MIB,
        optimization_level=level,
        shape_ranges=shape_ranges(inputs, options.opt_batch, options.max_batch),
        fp16_route=fp16_route,
        int8_route=int8_route,
        timing_cache=options.timing_cache,
        progress_monitor=version.has_progress_monitor,
        notes=tuple(notes),
    )


def shape_ranges(inputs: Sequence[TensorMeta], opt_batch: int, max_batch: int) -> tuple[ShapeRange, ...]:
    """An optimisation profile for a dynamic batch axis (axis 0): min 1, opt `opt_batch`, max `max_batch`.
    No profile when every input is static; any other dynamic axis is refused, since TensorRT needs a
    range for it and the profile has none to give."""
    if all(isinstance(dim, int) for meta in inputs for dim in meta.shape):
        return ()
    ranges = []
    for meta in inputs:
        if other := [axis for axis, dim in enumerate(meta.shape) if axis > 0 and not isinstance(dim, int)]:
            raise ConfigError(
                f"input '{meta.name}' ({meta.describe()}) has dynamic axes {other} besides the batch; TensorRT needs "
                "fixed sizes there: fix them in the model (e.g. edge-sdk graph, or export with fixed sizes)"
            )
        rest = tuple(int(dim) for dim in meta.shape[1:])  # type: ignore[arg-type]
        if meta.shape and isinstance(meta.shape[0], int):
            fixed = (meta.shape[0], *rest)
            ranges.append(ShapeRange(meta.name, fixed, fixed, fixed))
        else:
            ranges.append(ShapeRange(meta.name, (1, *rest), (opt_batch, *rest), (max_batch, *rest)))
    return tuple(ranges)


def _strongly_typed(options: TensorRTOptions, version: TensorRTVersion) -> bool:
    if version.strongly_typed_only:
        if options.strongly_typed is False:
            raise ConfigError(f"TensorRT {version} builds strongly typed networks only; drop strongly_typed: false")
        return True
    if options.strongly_typed is True:
        if not version.has_strongly_typed_flag:
            raise ConfigError(f"TensorRT {version} has no strongly typed networks (they came in 9.1)")
        return True
    return False
