"""The graph passes an engine build runs, in order, behind one function."""

from __future__ import annotations

import onnx

from edge_sdk.core.errors import ConfigError, EngineBuildError, ModelError, first_line

from .batch_size import BatchSize
from .batchnorm_folding import BatchNormFolding
from .constant_folding import ConstantFolding
from .graph_edit import keep_ir_version
from .model_pass import GraphPass, PassReport, run_passes
from .noop_removal import NoOpRemoval
from .options import GraphOptions
from .preprocess_folding import PreprocessFolding
from .shape_inference import ShapeInference
from .ssd_split import SsdSplit


def graph_passes(model: onnx.ModelProto, options: GraphOptions) -> list[GraphPass]:
    """preprocess folding (when options.preprocess is set and its `fold` is not false) -> the SSD split
    (when options.ssd_split) -> shape inference -> constant folding -> no-op removal ->
    BatchNormalization folding -> batch size (unless "keep") -> shape inference."""
    passes: list[GraphPass] = []
    if options.preprocess is not None and getattr(options.preprocess, "fold", True):
        input_name = _input_name(model, options.input_name)
        passes.append(PreprocessFolding(options.preprocess, input_name, integer_resize=options.integer_resize))
    if options.ssd_split:
        passes.append(SsdSplit())
    passes += [ShapeInference(), ConstantFolding(), NoOpRemoval(), BatchNormFolding()]
    if options.batch != "keep":
        passes.append(BatchSize(options.batch))
    passes.append(ShapeInference())
    return passes


def optimize_graph(model: onnx.ModelProto, options: GraphOptions) -> tuple[onnx.ModelProto, list[PassReport]]:
    """Run the passes `options` ask for; the result computes the same outputs (within float rounding).

    The input is left untouched, and the result has no newer IR version than it (what onnx would stamp
    may be newer than the installed ONNX Runtime reads). A model with no nodes or an unknown input name
    is refused before any work; a pass that produced an invalid model (an SDK bug) raises EngineBuildError.
    """
    if not isinstance(model, onnx.ModelProto) or not model.graph.node:
        raise ModelError("graph passes: expected an ONNX model with at least one node, got an empty graph")
    optimized, reports = run_passes(model, graph_passes(model, options))
    keep_ir_version(model, optimized)
    try:
        onnx.checker.check_model(optimized)
    except Exception as exc:  # ValidationError
        raise EngineBuildError(f"graph passes produced an invalid model: {first_line(exc)}") from None
    return optimized, reports


def _input_name(model: onnx.ModelProto, name: str | None) -> str:
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    if name is not None:
        if name not in inputs:
            raise ConfigError(f"model.input: the model has no input '{name}'; it has {inputs}")
        return name
    if len(inputs) != 1:
        raise ConfigError(f"model.input: the model has {len(inputs)} inputs {inputs}; name the one frames go to")
    return inputs[0]
