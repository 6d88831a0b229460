"""The façade: a model and a profile in, a ready engine out, built once and cached."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from edge_sdk.backends.int8.accuracy import AccuracyGate
from edge_sdk.backends.registry import BACKENDS
from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ConfigError, EngineBuildError
from edge_sdk.core.host import HostFacts, HostProbe
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision
from edge_sdk.core.progress import step
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.graph.options import GraphOptions
from edge_sdk.profiles import DeviceProfile
from edge_sdk.profiles.equivalence_settings import EquivalenceSettings

from .cache import CacheEntry, EngineCache, EngineKey, EntryReport
from .equivalence import GateData, GateFrames, GateVerdict, check_equivalence

if TYPE_CHECKING:
    from edge_sdk.backends.calibration.settings import Calibration
    from edge_sdk.graph.options import GraphOptions

GRAPH_DIR = "graph"
"""Holds the model after the SDK's graph passes (and folded preprocessing), under the user's file name
so that backend errors name the model the user gave: what the backend built from."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedEngine:
    """A cache entry ready to open, and whether this call had to build it."""

    entry: CacheEntry
    model: ModelFile
    profile: DeviceProfile
    precision: Precision
    built: bool
    seconds: float

    def open(self, threads: int | None = None, share_cpu: bool = False) -> EngineRunner:
        """A runner for this engine; use it as a context manager.

        `threads` overrides the profile's threads per inference (several workers on few cores each
        take fewer threads); `share_cpu` stops idle threads from busy-waiting, for when other stage
        processes need the same cores. Neither changes the engine, so the cached artifact is reused.
        """
        backend = self.profile.backend()
        options = backend.worker_options(self.profile.engine, threads, share_cpu)
        return backend.runner(self.entry.directory, options, self.precision)

    @property
    def folded(self) -> bool:
        """The preprocessing is inside the engine (it takes raw frames): asked for, and it passed the gate."""
        return entry_folded(self.entry)

    @property
    def gate(self) -> GateVerdict | None:
        """What the equivalence gate measured when this engine was built (None for older entries)."""
        return entry_gate(self.entry)

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        """The engine's inputs: the model's, unless the graph passes changed them (folded preprocessing)."""
        recorded = self.entry.manifest.get("facts", {}).get("engine_inputs")
        if recorded is not None:  # entries built before it was recorded parse their graph model
            return tuple(TensorMeta.from_dict(meta) for meta in recorded)
        graph_model = self.entry.directory / GRAPH_DIR / self.model.path.name
        return ModelFile.load(graph_model).inputs if graph_model.is_file() else self.model.inputs


def prepare_engine(
    model: str | os.PathLike[str] | ModelFile,
    profile: DeviceProfile,
    precision: Precision | None = None,
    cache: EngineCache | None = None,
    facts: HostFacts | None = None,
    *,
    graph: GraphOptions | None = None,
    calibration: Calibration | None = None,
    gate: GateData | None = None,
) -> PreparedEngine:
    """Validate arguments, then return the cached engine for this key or build it.

    `model` is an ONNX path, or a `ModelFile` the caller already loaded (so it is not read twice).
    `graph` says how the SDK's graph passes rewrite the model first (folded preprocessing, batch);
    the defaults still run them. `calibration` is required for int8 and ignored otherwise.

    Every build ends with the equivalence gate (equivalence.py) on `gate`'s frames (default: the
    shipped image): an engine that fails it is refused with EngineBuildError; when only its folded
    preprocessing fails, the engine is built again with the preprocessing left outside, with one
    warning (`PreparedEngine.folded` says which the entry holds).
    """

    started = time.perf_counter()
    precision = precision or profile.default_precision
    if precision not in profile.precisions:
        raise ConfigError(
            f"profile '{profile.name}' builds {', '.join(profile.precisions)}; got precision '{precision}'"
        )
    backend = profile.backend()
    builder = backend.builder()
    builder.check(profile.engine, precision)
    if precision == "int8" and calibration is None:
        raise ConfigError("precision int8 needs calibration data (edge-sdk build --calib DATA)")
    if precision != "int8":
        calibration = None
    graph = _with_profile_batch(graph or GraphOptions(), profile)
    graph = replace(graph, integer_resize=graph.integer_resize and exact_uint8_resize(profile))
    cache = cache or EngineCache()
    model = model if isinstance(model, ModelFile) else cache.models.load(model)
    key = EngineKey(
        model_sha256=model.sha256,
        profile_name=profile.name,
        profile_sha256=profile.content_hash(),
        backend=backend.name,
        backend_version=builder.version(),
        device_identity=(facts or HostProbe().facts()).device_identity(),
        precision=precision,
        input_shapes=";".join(meta.describe() for meta in model.inputs),
        graph_sha256=graph.fingerprint(),
        calibration_sha256=calibration.fingerprint() if calibration else None,
    )

    settings = profile.equivalence or EquivalenceSettings()
    thresholds = _gate_thresholds(settings, calibration)
    what = f"{model.path.name} on {profile.name} ({precision})"

    def build_and_gate(
        out_dir: Path, passes: GraphOptions, data: GateData, read: GateFrames
    ) -> tuple[dict[str, object], GateVerdict]:
        frames, origin = read
        with step("graph passes", model.path.name):
            graph_model, graph_facts = _apply_graph_passes(model, passes, out_dir / GRAPH_DIR / model.path.name)
        with step(f"{backend.name} build", f"{precision} engine"):
            build_facts = builder.build(graph_model, profile.engine, precision, out_dir, calibration)
        runner = backend.runner(out_dir, profile.engine, precision)
        with step("equivalence gate", origin):
            verdict = check_equivalence(model, runner, passes.preprocess is not None, data, frames, origin, thresholds)
        learned = {
            "model_path": str(model.path.resolve()),
            "graph_passes": graph_facts,
            "engine_inputs": [meta.to_dict() for meta in graph_model.inputs],
            **build_facts,
        }
        return learned, verdict

    def build(out_dir: Path) -> dict[str, object]:
        log.info("building %s engine for %s (%s, %s)", backend.name, model.path.name, profile.name, precision)
        model.check()
        data = _gate_data(gate, graph, calibration)
        read = data.read_frames(settings.frames)
        facts, verdict = build_and_gate(out_dir, graph, data, read)
        if not verdict.passed and graph.preprocess is not None:
            log.warning(
                "%s: the folded preprocessing fails the equivalence gate (%s); building the engine with the "
                "preprocessing outside it",
                what,
                "; ".join(verdict.failures),
            )
            _empty(out_dir)
            facts, unfolded = build_and_gate(out_dir, replace(graph, preprocess=None), data, read)
            verdict = replace(unfolded, fold_fallback=verdict.line())
        if not verdict.passed:
            raise EngineBuildError(f"{what}: refused, the engine does not match the model: {verdict.line()}")
        return facts | {"equivalence": verdict.to_dict()}

    entry, built = cache.get_or_build(key, build)
    if not built and (stale := backend.stale(entry.directory, profile.engine)):
        log.warning("%s: rebuilding the cached engine: %s", what, stale)
        cache.remove(entry.directory.name)
        entry, built = cache.get_or_build(key, build)
    cache.models.remember(model)
    return PreparedEngine(entry, model, profile, precision, built, time.perf_counter() - started)


def exact_uint8_resize(profile: DeviceProfile) -> bool:
    """Whether a folded resize may run on the raw uint8 NHWC frame for `profile` (its backend says)."""
    return profile.backend().exact_uint8_resize(profile.engine)


def entry_folded(entry: CacheEntry) -> bool:
    """Whether a cache entry's engine has the preprocessing folded in (it takes raw frames)."""
    passes = entry.manifest.get("facts", {}).get("graph_passes", [])
    return any(report.get("name") == "preprocess_folding" for report in passes)


def entry_gate(entry: CacheEntry) -> GateVerdict | None:
    """The equivalence gate's verdict a cache entry was built with (None for entries built before it)."""
    recorded = entry.manifest.get("facts", {}).get("equivalence")
    return GateVerdict.from_dict(recorded) if isinstance(recorded, dict) else None


def _gate_thresholds(settings: EquivalenceSettings, calibration: Calibration | None) -> AccuracyGate:
    """The profile's tolerances; an int8 engine may also drift as far as its own int8 gate allows."""
    if calibration is None:
        return AccuracyGate(settings.max_drop, settings.min_cosine)
    int8 = calibration.settings
    return AccuracyGate(max(settings.max_drop, int8.max_accuracy_drop), min(settings.min_cosine, int8.min_cosine))


def _gate_data(gate: GateData | None, graph: GraphOptions, calibration: Calibration | None) -> GateData:
    """The caller's frames, else the shipped image's; the folded preprocessing is how frames feed the
    reference model when the caller gave none, and an int8 build's calibration data feeds a model that
    frames cannot (random inputs would leave its calibrated ranges)."""
    data = gate or GateData.scene()
    if data.preprocess is None and graph.preprocess is not None:
        data = replace(data, preprocess=graph.preprocess, input_name=graph.input_name)
    if calibration is not None and data.model_samples is None:
        reader = calibration.reader
        data = replace(data, model_samples=lambda count: [dict(s) for s in islice(reader, count)])
    return data


def _empty(directory: Path) -> None:
    for child in directory.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()


def _with_profile_batch(graph: GraphOptions, profile: DeviceProfile) -> GraphOptions:
    """The profile's batch axis, unless the caller asked for one."""
    if graph.batch != "keep" or profile.batch == "keep":
        return graph
    return replace(graph, batch=None if profile.batch == "dynamic" else profile.batch)


def _apply_graph_passes(
    model: ModelFile, graph: GraphOptions, destination: Path
) -> tuple[ModelFile, list[dict[str, object]]]:
    import onnx  # builds only: a start with a cached engine never loads onnx

    from edge_sdk.graph.optimize import optimize_graph

    optimized, reports = optimize_graph(onnx.load(str(model.path)), graph)
    destination.parent.mkdir()
    onnx.save(optimized, str(destination))
    for report in reports:
        log.debug(
            "graph pass %s: %d -> %d nodes %s", report.name, report.nodes_before, report.nodes_after, report.detail
        )
    return ModelFile.load(destination), [report.to_dict() for report in reports]


def verify_cache(cache: EngineCache) -> list[EntryReport]:
    """Check every entry: files against their hashes, and the backend version against the installed one."""
    reports = []
    installed: dict[str, str | None] = {}
    for report in cache.entries():
        if report.problem is None:
            key = report.manifest.get("key", {})
            backend = key.get("backend")
            if backend not in installed:
                installed[backend] = _installed_version(backend)
            if installed[backend] is None:
                report = EntryReport(
                    report.digest, report.directory, report.manifest, f"backend '{backend}' is not installed"
                )
            elif key.get("backend_version") != installed[backend]:
                report = EntryReport(
                    report.digest,
                    report.directory,
                    report.manifest,
                    f"stale: built with {backend} {key.get('backend_version')}, installed {installed[backend]}",
                )
        reports.append(report)
    return reports


def _installed_version(backend: str | None) -> str | None:
    if backend not in BACKENDS:
        return None
    try:
        return BACKENDS[backend].builder().version()
    except Exception:  # any failure to import the backend means it cannot run here
        return None
