"""Check that a pipeline's models fit it, then get their engines: shared by both runtimes."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.engines.model_file import ModelFile
from edge_sdk.engines.tensor_meta import select_input
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.postprocess.cascade import Cascade, NoCascade
from edge_sdk.postprocess.classification import ClassificationPostprocessor
from edge_sdk.profiles import DeviceProfile

from .config import PipelineConfig
from .preprocess import Preprocessor


@dataclass(frozen=True)
class PreparedModels:
    primary: PreparedEngine
    input_name: str
    cascade: PreparedEngine | None


def prepare_models(config: PipelineConfig, profile: DeviceProfile, cache: EngineCache | None) -> PreparedModels:
    """Every model/pipeline mismatch is reported before any engine is built."""
    model = ModelFile.load(config.model.path)
    model_input = select_input(model.inputs, config.model.input, "model.input")
    Preprocessor(config.preprocess, model_input)
    build_postprocessor(config.postprocess).check_outputs(model.outputs)
    cascade_model = None
    if config.cascade is not None:
        cascade_model = ModelFile.load(config.cascade.model)
        Preprocessor(
            config.cascade.preprocess, select_input(cascade_model.inputs, config.cascade.input, "cascade.input")
        )
        ClassificationPostprocessor(config.cascade.postprocess).check_outputs(cascade_model.outputs)
    primary = prepare_engine(model, profile, config.model.precision, cache)
    cascade = (
        prepare_engine(cascade_model, profile, config.cascade.precision, cache)
        if config.cascade is not None and cascade_model is not None
        else None
    )
    return PreparedModels(primary, model_input.name, cascade)


def open_cascade(config: PipelineConfig, models: PreparedModels, stack: ExitStack) -> Cascade | NoCascade:
    """The cascade step with its engine open for the life of `stack`, or the null step."""
    if config.cascade is None or models.cascade is None:
        return NoCascade()
    return Cascade(config.cascade, stack.enter_context(models.cascade.open()))
