"""Calibrate once, quantise as often as needed: ONNX Runtime's static QDQ quantisation, split in two steps.

`calibrate` runs the calibration data through the model and keeps the ranges (and histograms for the
entropy and percentile methods); `quantize_with_ranges` turns those ranges into a QDQ model with any
set of nodes left in float, which is what mixed precision and sensitivity analysis need.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from edge_sdk.core.errors import ConfigError, EngineBuildError, first_line
from edge_sdk.core.host import HostProbe
from edge_sdk.core.progress import report
from edge_sdk.graph.graph_edit import keep_ir_version

from ..calibration.settings import Int8Settings
from .library import import_onnxruntime

log = logging.getLogger(__name__)

# Per-channel QuantizeLinear/DequantizeLinear (their `axis`) needs opset 13.
MIN_OPSET = 13
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
"""x86 CPU flags of 8-bit dot products that accumulate in 32 bits (no saturation)."""
_CHUNK = 16
"""Samples per calibration pass: bounds the intermediate tensors held in memory at once."""


@dataclass(frozen=True)
class TensorRanges:
    """Calibrated ranges per float tensor, with histograms for the entropy and percentile methods."""

    method: str
    data: Any
    """onnxruntime.quantization.TensorsData, as ONNX Runtime's quantiser takes it."""

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tensor name -> (lowest, highest) value the quantiser will represent."""
        return {name: (float(np.min(t.lowest)), float(np.max(t.highest))) for name, t in self.data.items()}

    def __len__(self) -> int:
        return len(self.data.keys())


def prepare_for_quantization(model_path: Path, out_path: Path) -> Path:
    """Shape inference and basic optimisations, as quant_pre_process does; every node named; opset >= 13.

    Done here rather than through quant_pre_process, which imports torch when it is installed (seconds).
    Node names are what quantisation excludes by, so calibrate, quantise and analyse the same prepared file.
    """
    ort = import_onnxruntime()
    model = source = onnx.load(str(model_path))
    if _opset(model) < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:  # the converter raises plain RuntimeErrors/ValueErrors
            raise EngineBuildError(
                f"{model_path.name}: int8 needs opset {MIN_OPSET} or newer; converting from opset "
                f"{_opset(model)} failed: {first_line(exc)}"
            ) from None
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        with _quiet():
            model = SymbolicShapeInference.infer_shapes(model, 2**31 - 1, False, False, 0)
    except Exception as exc:  # symbolic inference gives up on some graphs; ONNX's own inference follows
        log.debug("symbolic shape inference skipped for %s: %s", model_path.name, exc)
    with tempfile.TemporaryDirectory(prefix="edge-sdk-prepare-") as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        try:
            ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            model = onnx.load(so.optimized_model_filepath)
        except Exception as exc:  # quantise the unoptimised graph rather than fail
            log.debug("basic optimisation skipped for %s: %s", model_path.name, exc)
    model = onnx.shape_inference.infer_shapes(model)
    names = {node.name for node in model.graph.node}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            node.name = _unique(f"{node.op_type}_{index}", names)
    onnx.helper.set_model_props(
        model, {**{p.key: p.value for p in model.metadata_props}, "onnx.quant.pre_process": "onnxruntime.quant"}
    )
    onnx.save(keep_ir_version(source, model), str(out_path))
    return out_path


def calibrate(model_path: Path, samples: Iterable[Mapping[str, np.ndarray]], settings: Int8Settings) -> TensorRanges:
    """Run the samples through the model once and compute the range of every float tensor."""
    quant = _quantization()
    method = _METHODS[settings.method]
    options: dict[str, Any] = {"symmetric": settings.activation_symmetric}
    if settings.method == "percentile":
        options["percentile"] = settings.percentile
    samples = list(samples)
    if not samples:
        raise ConfigError("calibration: expected at least one sample, got none")
    calibrator = None
    with tempfile.TemporaryDirectory(prefix="edge-sdk-calibrate-") as tmp, _quiet():
        local = _copy_into(model_path, Path(tmp))
        try:
            calibrator = quant.create_calibrator(
                local,
                _op_types(),
                augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                calibrate_method=getattr(quant.CalibrationMethod, method),
                extra_options=options,
            )
            task = f"calibration ({settings.method})"
            report(task, 0, len(samples))
            for start in range(0, len(samples), _CHUNK):
                calibrator.collect_data(_Samples(samples[start : start + _CHUNK]))
                report(task, min(start + _CHUNK, len(samples)), len(samples))
            data = calibrator.compute_data()  # entropy and percentile: the histograms' search, seconds
            report(task, len(samples), len(samples), finished=True)
        except (ValueError, RuntimeError) as exc:
            raise EngineBuildError(
                f"calibration ({settings.method}) of {model_path.name} failed: {first_line(exc)}"
            ) from None
        finally:
            calibrator = None  # frees its session before the temp dir goes
    return TensorRanges(settings.method, data)


def quantize_with_ranges(
    model_path: Path,
    ranges: TensorRanges,
    settings: Int8Settings,
    exclude_nodes: Sequence[str] = (),
    only_nodes: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """A QDQ model: every quantisable node (or only `only_nodes`) except `exclude_nodes` in 8 bits."""
    quant = _quantization()
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer, update_opset_version

    with tempfile.TemporaryDirectory(prefix="edge-sdk-quantize-") as tmp:
        model = load_model_with_shape_infer(_copy_into(model_path, Path(tmp)))
    source = onnx.ModelProto(ir_version=model.ir_version)
    known = {node.name for node in model.graph.node}
    unknown = sorted(set(exclude_nodes) - known) + sorted(set(only_nodes or ()) - known)
    if unknown:
        raise ConfigError(f"quantisation: expected node names of {model_path.name}, got unknown {unknown[:5]}")
    if only_nodes is not None and not set(only_nodes) - set(exclude_nodes):
        return onnx.load(str(model_path))  # nothing to quantise (ONNX Runtime reads an empty list as "all")
    weight_type = _TYPES[settings.weight_type](quant)
    activation_type = _TYPES[settings.activation_type](quant)
    model = update_opset_version(model, weight_type)
    quantizer = QDQQuantizer(
        model,
        settings.per_channel,
        resolve_reduce_range(settings),
        weight_type,
        activation_type,
        copy.deepcopy(ranges.data),  # the quantiser adjusts ranges in place; callers quantise many times
        list(only_nodes or []),
        list(exclude_nodes),
        _op_types(),
        {"ActivationSymmetric": settings.activation_symmetric},
    )
    with _quiet():
        try:
            quantizer.quantize_model()
        except (ValueError, RuntimeError, KeyError) as exc:
            raise EngineBuildError(f"quantisation of {model_path.name} failed: {first_line(exc)}") from None
    result: onnx.ModelProto = quantizer.model.model
    return keep_ir_version(source, result)


def resolve_reduce_range(settings: Int8Settings) -> bool:
    """The profile's reduce_range, with "auto" decided by this host's CPU (7-bit weights without VNNI)."""
    if settings.reduce_range != "auto":
        return settings.reduce_range
    return _x86_without_vnni()


@functools.cache
def _x86_without_vnni() -> bool:

    facts = HostProbe().facts()
    return facts.arch == "x86_64" and not facts.cpu_flags & VNNI_FLAGS


def quantizable_nodes(model: onnx.ModelProto | Path) -> list[str]:
    """Names of the nodes the quantiser would put in 8 bits, in graph order."""
    from onnxruntime.quantization.registry import QDQRegistry

    # Only the QDQ set: the quantiser also touches QLinear-only ops (Add, Mul, Concat, ...), but
    # quantising some of those alone makes graphs ONNX Runtime aborts on (seen on the SSD detector).
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    return [node.name for node in proto.graph.node if node.op_type in QDQRegistry and node.name]


def count_int8_nodes(model: onnx.ModelProto) -> int:
    """Compute nodes fed by a DequantizeLinear: the ones that will run on 8-bit data."""
    dequantized = {out for node in model.graph.node if node.op_type == "DequantizeLinear" for out in node.output}
    return sum(
        1
        for node in model.graph.node
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") and dequantized.intersection(node.input)
    )


_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
_TYPES = {
    "uint8": lambda quant: quant.QuantType.QUInt8,
    "int8": lambda quant: quant.QuantType.QInt8,
}


class _Samples:
    """onnxruntime's CalibrationDataReader protocol (get_next, None at the end) over a list of feeds."""

    def __init__(self, samples: Sequence[Mapping[str, np.ndarray]]):
        self._iterator: Iterator[Mapping[str, np.ndarray]] = iter(samples)
        self._count = len(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        sample = next(self._iterator, None)
        return dict(sample) if sample is not None else None

    def __len__(self) -> int:
        return self._count


def _quantization() -> Any:
    import_onnxruntime()  # the clear "install edge-sdk[cpu]" error when onnxruntime is missing
    from onnxruntime import quantization

    return quantization


def _op_types() -> list[str]:
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QDQRegistry) | set(QLinearOpsRegistry))


def _copy_into(model_path: Path, folder: Path) -> Path:
    """A self-contained copy (ONNX Runtime's helpers write '-inferred' files beside the model they load)."""
    local = folder / "model.onnx"
    onnx.save(onnx.load(str(model_path)), str(local))
    return local


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ONNX Runtime's quantisation tools print progress to stdout and warn through logging; keep both out."""
    quant_logger = logging.getLogger()
    level = quant_logger.level
    quant_logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        quant_logger.setLevel(level)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _unique(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken.add(candidate)
    return candidate
