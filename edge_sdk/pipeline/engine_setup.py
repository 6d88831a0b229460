"""Check that a pipeline's models fit it, then get their engines: shared by both runtimes."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge_sdk.backends.calibration import int8_settings, make_calibration
from edge_sdk.core.errors import ConfigError, ModelError, SourceError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.core.tensor_meta import TensorMeta, select_input
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.engines.equivalence import GateData, GateFrames, shipped_frames, source_frames
from edge_sdk.graph.options import FRAME_INPUT, GraphOptions
from edge_sdk.pipeline.cascade import Cascade, NoCascade
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.fallback import FallbackPlan, check_fallback_outputs, fallback_config
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.postprocess.classification import ClassificationPostprocessor
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sources.registry import create_source

if TYPE_CHECKING:
    from edge_sdk.backends.calibration import Calibration
    from edge_sdk.graph.options import GraphOptions


@dataclass(frozen=True)
class PreparedModels:
    primary: PreparedEngine
    engine_input: TensorMeta
    """The primary engine's input that frames go to: raw frames when preprocess.fold is on."""
    cascade: PreparedEngine | None
    preprocess: PreprocessSpec
    """The pipeline's preprocessing as the engine needs it: `fold` off when the folded form failed the
    equivalence gate and the engine was built with the preprocessing outside it."""
    fallback: FallbackPlan | None = None
    """The `fallback:` model's engine, when the pipeline has one."""

    @property
    def input_name(self) -> str:
        return self.engine_input.name


def prepare_models(config: PipelineConfig, profile: DeviceProfile, cache: EngineCache | None) -> PreparedModels:
    """Every model/pipeline mismatch is reported before any engine is built."""
    cache = cache or EngineCache()
    model = cache.models.load(config.model.path)
    model_input = select_input(model.inputs, config.model.input, "model.input")
    Preprocessor(config.preprocess, model_input)
    build_postprocessor(config.postprocess).check_outputs(model.outputs)
    cascade_model = None
    if config.cascade is not None:
        cascade_model = cache.models.load(config.cascade.model)
        Preprocessor(
            config.cascade.preprocess, select_input(cascade_model.inputs, config.cascade.input, "cascade.input")
        )
        ClassificationPostprocessor(config.cascade.postprocess).check_outputs(cascade_model.outputs)
    fallback_model = _check_fallback(config, cache, model, model_input) if config.fallback is not None else None
    precision = config.model.precision or profile.default_precision
    calibration = pipeline_calibration(config, model, profile) if precision == "int8" else None
    # The cascade classifier stays unfolded: its crops are cut and preprocessed in the output stage.
    graph = pipeline_graph(config, model)
    gate = pipeline_gate(config, model_input.name)
    primary = prepare_engine(model, profile, precision, cache, graph=graph, calibration=calibration, gate=gate)
    cascade = (
        prepare_engine(cascade_model, profile, config.cascade.precision, cache)
        if config.cascade is not None and cascade_model is not None
        else None
    )
    preprocess = config.preprocess.model_copy(update={"fold": primary.folded})
    fallback = _prepare_fallback(config, profile, cache, fallback_model) if fallback_model is not None else None
    return PreparedModels(primary, _engine_input(primary, model_input, primary.folded), cascade, preprocess, fallback)


def _check_fallback(
    config: PipelineConfig, cache: EngineCache, primary: ModelFile, primary_input: TensorMeta
) -> ModelFile:
    """The fallback model, once it is known to fit: its input takes its preprocessing, and the primary's
    post-processor reads its outputs as it reads the primary's."""
    view = fallback_config(config)
    model = cache.models.load(view.model.path)
    model_input = select_input(model.inputs, view.model.input, "fallback.input")
    try:
        Preprocessor(view.preprocess, model_input)
    except ModelError as error:
        raise ModelError(f"fallback {model.path.name}: {error} (fallback.preprocess)") from None
    same_input = tuple(model_input.shape[1:]) == tuple(primary_input.shape[1:])
    postprocess = build_postprocessor(config.postprocess)
    check_fallback_outputs(primary.outputs, model.outputs, postprocess, same_input, f"fallback {model.path.name}")
    return model


def _prepare_fallback(
    config: PipelineConfig, profile: DeviceProfile, cache: EngineCache, model: ModelFile
) -> FallbackPlan:
    """The fallback's engine, prepared as the primary of the pipeline seen with the fallback in its place."""
    assert config.fallback is not None
    view = fallback_config(config)
    model_input = select_input(model.inputs, view.model.input, "fallback.input")
    precision = view.model.precision or profile.default_precision
    calibration = pipeline_calibration(view, model, profile) if precision == "int8" else None
    gate = pipeline_gate(view, model_input.name)
    engine = prepare_engine(
        model, profile, precision, cache, graph=pipeline_graph(view, model), calibration=calibration, gate=gate
    )
    preprocess = view.preprocess.model_copy(update={"fold": engine.folded})
    return FallbackPlan(engine, _engine_input(engine, model_input, engine.folded), preprocess, config.fallback.breaker)


def pipeline_graph(config: PipelineConfig, model: ModelFile) -> GraphOptions | None:
    """The graph passes a run of this pipeline builds its engine with: preprocessing folded when asked,
    and an SSD graph cut after its box head when its post-processing decodes on the host (decode: sdk)."""

    split = config.postprocess.type == "ssd" and config.postprocess.decode == "sdk"
    if not config.preprocess.fold and not split:
        return None
    preprocess = config.preprocess if config.preprocess.fold else None
    return GraphOptions(preprocess=preprocess, input_name=pipeline_input(config, model), ssd_split=split)


def pipeline_input(config: PipelineConfig, model: ModelFile) -> str:
    """The name of the model input this pipeline's frames go to."""
    return select_input(model.inputs, config.model.input, "model.input").name


def pipeline_gate(config: PipelineConfig, input_name: str | None) -> GateData:
    """The equivalence gate's data for this pipeline's engine: frames of its first file source (the
    shipped image when every source is live, or the file gives none), fed and judged as the pipeline
    feeds and judges them. Sources are made only when a build reads the frames."""

    def read_frames(count: int) -> GateFrames:

        for spec in config.sources:
            try:
                source = create_source(spec, config.base_dir)
            except SourceError:  # the run reports it; the gate only needs frames
                continue
            if not source.is_live:
                frames = source_frames(source, count)
                return (frames, f"source {source.name}") if frames else shipped_frames(count)
        return shipped_frames(count)

    return GateData(read_frames, config.preprocess, input_name, config.postprocess)


def pipeline_calibration(
    config: PipelineConfig, model: ModelFile, profile: DeviceProfile, data: Path | None = None, **overrides: object
) -> Calibration:
    """The int8 calibration of this pipeline's model: `data` and `overrides` (from the CLI) win over the
    pipeline's `model.calibration`, which wins over the profile's `int8` settings."""

    spec = config.model.calibration
    data = data or (spec.data if spec else None)
    if data is None:
        raise ConfigError(
            "precision int8 needs calibration data: set model.calibration.data in the pipeline "
            "(a folder of images, a video or an .npz) or pass --calib DATA"
        )
    from_pipeline = spec.model_dump(exclude={"data"}, exclude_none=True) if spec else {}
    task = overrides.pop("task", None)
    settings = int8_settings(profile.int8, **(from_pipeline | {k: v for k, v in overrides.items() if v is not None}))
    return make_calibration(
        data,
        model,
        settings,
        task,  # type: ignore[arg-type]
        preprocess=config.preprocess,
        postprocess=config.postprocess,
        input_name=config.model.input,
    )


def _engine_input(primary: PreparedEngine, model_input: TensorMeta, folded: bool) -> TensorMeta:
    """The input as the built engine has it (the graph passes may have replaced it)."""

    return select_input(primary.inputs, FRAME_INPUT if folded else model_input.name, "model.input")


def open_cascade(config: PipelineConfig, models: PreparedModels, stack: ExitStack) -> Cascade | NoCascade:
    """The cascade step with its engine open for the life of `stack`, or the null step."""
    if config.cascade is None or models.cascade is None:
        return NoCascade()
    return Cascade(config.cascade, stack.enter_context(models.cascade.open()))
