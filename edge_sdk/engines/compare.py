"""Compare two engines on the same inputs, per output: the consistency check before a rollout.

An engine spec is one of
- `MODEL.onnx`: the reference, plain ONNX Runtime on the CPU in FP32 with graph optimisation off;
- `MODEL.onnx@PROFILE`, `MODEL.onnx@PROFILE:PRECISION`, `MODEL.onnx:PRECISION`: the engine the SDK
  builds for that profile (the detected one when omitted) and precision, built first when not cached;
- a cache entry digest (a unique prefix is enough): that cached engine as it is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.backends.calibration import Calibration, SampleSet, open_calibration_data
from edge_sdk.backends.calibration.setup import implied_task
from edge_sdk.backends.int8.accuracy import AccuracyGate, AccuracyReport, compare_outputs, run_samples
from edge_sdk.backends.onnxruntime.reference import ReferenceRunner
from edge_sdk.backends.registry import get_backend
from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ConfigError, EngineBuildError, ModelError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import PRECISIONS, Precision
from edge_sdk.core.tensor_meta import select_input
from edge_sdk.graph.options import GraphOptions
from edge_sdk.profiles import DeviceProfile, ProfileCatalog

from .cache import CacheEntry, EngineCache
from .engine import GRAPH_DIR, entry_folded, prepare_engine

if TYPE_CHECKING:
    from edge_sdk.backends.calibration.setup import TaskKind
    from edge_sdk.core.preprocess import PreprocessSpec
    from edge_sdk.graph.options import GraphOptions
    from edge_sdk.postprocess import AnyPostprocessSpec

_DIGEST = re.compile(r"^[0-9a-f]{4,64}$")
SPEC_FORMS = "MODEL.onnx, MODEL.onnx@PROFILE[:PRECISION], MODEL.onnx:PRECISION or a cache digest prefix"


@dataclass(frozen=True)
class EngineSpec:
    """What the user named on the command line, parsed but not yet opened."""

    text: str
    model: Path | None = None
    profile: str | None = None
    precision: Precision | None = None
    digest: str | None = None

    @property
    def is_reference(self) -> bool:
        return self.model is not None and self.profile is None and self.precision is None


def parse_engine_spec(text: str) -> EngineSpec:
    """Parse one spec; a malformed one raises ConfigError naming the accepted forms."""
    text = text.strip()
    if not text:
        raise ConfigError(f"engine spec: expected {SPEC_FORMS}, got an empty string")
    model_part, at, target = text.rpartition("@") if "@" in text else (text, "", "")
    profile: str | None = None
    precision: str | None = None
    if at:
        profile, colon, precision_text = target.partition(":")
        precision = precision_text if colon else None
        if not profile:
            raise ConfigError(f"engine spec '{text}': expected a profile name after '@', got nothing")
    else:
        head, colon, tail = text.rpartition(":")
        if colon and tail in PRECISIONS:
            model_part, precision = head, tail
        elif colon and tail and not Path(text).exists() and head.endswith(".onnx"):
            raise ConfigError(f"engine spec '{text}': expected a precision in {', '.join(PRECISIONS)}, got '{tail}'")
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError(f"engine spec '{text}': expected a precision in {', '.join(PRECISIONS)}, got '{precision}'")
    if not at and precision is None and _DIGEST.match(text) and not Path(text).exists():
        return EngineSpec(text, digest=text)
    model = Path(model_part)
    if model.suffix.lower() != ".onnx" and not model.exists():
        raise ConfigError(f"engine spec '{text}': expected {SPEC_FORMS}, got neither an .onnx path nor a digest")
    return EngineSpec(text, model=model, profile=profile, precision=precision)


@dataclass(frozen=True)
class ResolvedEngine:
    """An engine ready to open, with the model whose inputs the comparison data must fill."""

    label: str
    open: Callable[[], EngineRunner]
    feeds_model: ModelFile
    folded: bool = False
    """The pipeline's preprocessing is inside the engine: it takes raw BGR frames."""


@dataclass(frozen=True)
class CompareSetup:
    """Everything both sides of a comparison share."""

    catalog: ProfileCatalog
    cache: EngineCache
    task: TaskKind | None = None
    """None: from `postprocess`, else classification when the data has labels, else generic."""
    postprocess: AnyPostprocessSpec | None = None
    preprocess: PreprocessSpec | None = None
    input_name: str | None = None
    limit: int | None = None
    calibration: Callable[[ModelFile, DeviceProfile], Calibration] | None = None
    """Makes the Calibration for an int8 build (from --calib); None when no calibration data was given."""


@dataclass(frozen=True)
class EngineComparison:
    a: str
    b: str
    samples: int
    report: AccuracyReport
    outputs_only_in: dict[str, list[str]] = field(default_factory=dict)
    task_note: str = ""
    """Why the report's task, when A's outputs implied it (a detector's: matched boxes)."""

    def failures(self, min_cosine: float | None = None, max_drop: float | None = None) -> list[str]:
        """What misses the thresholds, as sentences (empty = the check passed), judged like the int8 gate:
        `max_drop` points of the task metric (top-1 accuracy or agreement, matched boxes), `min_cosine` per
        output except for detection, whose raw outputs come in NMS order."""
        if min_cosine is None and max_drop is None:
            return []
        gate = AccuracyGate(
            max_accuracy_drop=math.inf if max_drop is None else max_drop,
            min_cosine=-math.inf if min_cosine is None else min_cosine,
        )
        return gate.failures(self.report, names=("A", "B"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "samples": self.samples,
            "report": self.report.to_dict(),
            "outputs_only_in": self.outputs_only_in,
            "task_note": self.task_note,
        }


def resolve_engine(spec: EngineSpec, setup: CompareSetup) -> ResolvedEngine:
    """Find or build the engine a spec names (building may take a while)."""
    if spec.digest is not None:
        return _cached_engine(spec, setup)
    assert spec.model is not None
    model = ModelFile.load(spec.model)
    if spec.is_reference:
        return ResolvedEngine(
            f"{spec.model.name} (reference: ONNX Runtime CPU fp32)", lambda: ReferenceRunner(model.path), model
        )

    profile = setup.catalog.resolve(spec.profile)
    precision = spec.precision or profile.default_precision
    calibration = None
    if precision == "int8":
        if setup.calibration is None:
            raise ConfigError(
                f"engine spec '{spec.text}': precision int8 needs calibration data; pass --calib DATA (or name the cached engine by its digest)"
            )
        calibration = setup.calibration(model, profile)
    graph = _graph_options(model, setup)
    prepared = prepare_engine(model, profile, precision, setup.cache, graph=graph, calibration=calibration)
    feeds_model = _graph_model(prepared.entry) or model
    label = f"{spec.model.name}@{profile.name}:{precision} ({prepared.entry.digest[:12]})"
    return ResolvedEngine(label, prepared.open, feeds_model, prepared.folded)


def _graph_options(model: ModelFile, setup: CompareSetup) -> GraphOptions | None:
    """The pipeline's preprocessing folded into the engine, as `edge-sdk build --pipeline` and runs do it."""
    if setup.preprocess is None or not setup.preprocess.fold:
        return None

    return GraphOptions(preprocess=setup.preprocess, input_name=select_input(model.inputs, setup.input_name).name)


def _cached_engine(spec: EngineSpec, setup: CompareSetup) -> ResolvedEngine:
    assert spec.digest is not None
    reports = [r for r in setup.cache.entries() if r.digest.startswith(spec.digest)]
    if not reports:
        raise ConfigError(
            f"engine spec '{spec.text}': no cache entry starts with '{spec.digest}' in {setup.cache.root}"
        )
    if len(reports) > 1:
        matches = ", ".join(r.digest[:12] for r in reports)
        raise ConfigError(f"engine spec '{spec.text}': expected one cache entry, got {len(reports)} ({matches})")
    report = reports[0]
    if report.problem:
        raise EngineBuildError(f"cache entry {report.digest[:12]} is unusable: {report.problem}")
    entry = CacheEntry(report.directory, report.manifest)
    key = entry.key
    profile = setup.catalog.load(str(key.get("profile_name")))
    precision = key.get("precision", "fp32")
    backend = get_backend(str(key.get("backend")))
    model_path = Path(str(entry.manifest.get("facts", {}).get("model_path", "")))
    feeds_model = _graph_model(entry) or (ModelFile.load(model_path) if model_path.is_file() else None)
    if feeds_model is None:
        raise ModelError(f"cache entry {entry.digest[:12]}: expected its graph model or {model_path}, found neither")
    label = f"{model_path.name}@{profile.name}:{precision} (cached {entry.digest[:12]})"

    return ResolvedEngine(
        label, lambda: backend.runner(entry.directory, profile.engine, precision), feeds_model, entry_folded(entry)
    )


def _graph_model(entry: CacheEntry) -> ModelFile | None:
    """The model after the SDK's graph passes, whose inputs the engine takes (None for older entries)."""

    found = sorted((entry.directory / GRAPH_DIR).glob("*.onnx"))
    return ModelFile.load(found[0]) if found else None


def compare_engines(a: EngineSpec, b: EngineSpec, data: Path, setup: CompareSetup) -> EngineComparison:
    """Run both engines on the same data; `a` is the reference side of every figure."""
    first, second = resolve_engine(a, setup), resolve_engine(b, setup)
    samples_a, samples_b = _load_samples(first, data, setup), _load_samples(second, data, setup)
    if len(samples_a) != len(samples_b):
        raise ModelError(
            f"--data {data}: expected the same number of samples for both engines, got {len(samples_a)} and {len(samples_b)}"
        )
    with first.open() as runner:
        outputs_a = run_samples(runner, list(samples_a))
    with second.open() as runner:
        outputs_b = run_samples(runner, list(samples_b))
    shared = [name for name in outputs_a[0] if name in outputs_b[0]]
    if not shared:
        raise ModelError(
            f"expected the engines to share output names, got {sorted(outputs_a[0])} and {sorted(outputs_b[0])}"
        )
    only = {
        first.label: sorted(set(outputs_a[0]) - set(shared)),
        second.label: sorted(set(outputs_b[0]) - set(shared)),
    }
    task, task_note = implied_task(
        setup.task, setup.postprocess, samples_a.labels is not None, first.feeds_model.outputs
    )
    report = compare_outputs(
        [_select(o, shared) for o in outputs_a], [_select(o, shared) for o in outputs_b], task, samples_a.labels
    )
    kept = {k: v for k, v in only.items() if v}
    return EngineComparison(first.label, second.label, len(samples_a), report, kept, task_note)


def _load_samples(engine: ResolvedEngine, data: Path, setup: CompareSetup) -> SampleSet:
    # Frames go through the pipeline's preprocessing, or in raw when the engine has it folded into its graph
    # (a uint8 NHWC preprocessing would otherwise fit the raw-frame input and be applied twice).
    preprocess, input_name = (None, None) if engine.folded else (setup.preprocess, setup.input_name)
    reader = open_calibration_data(data, engine.feeds_model, preprocess, input_name, setup.limit)
    return SampleSet.from_reader(reader, engine.feeds_model.inputs)


def _select(outputs: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {name: outputs[name] for name in names}
