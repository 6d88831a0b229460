"""The façade: a model and a profile in, a ready engine out, built once and cached."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edge_sdk.errors import ConfigError
from edge_sdk.precision import Precision
from edge_sdk.profiles import DeviceProfile, HostFacts, HostProbe

from .cache import CacheEntry, EngineCache, EngineKey, EntryReport
from .model_file import ModelFile
from .registry import BACKENDS, get_backend
from .runner import EngineRunner
from .tensor_meta import TensorMeta

if TYPE_CHECKING:
    from edge_sdk.graph.options import GraphOptions

    from .calibration.settings import Calibration

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
        backend = get_backend(self.profile.engine.backend)
        options = self.profile.engine
        if threads is not None:
            options = options.model_copy(update={"intra_op_threads": threads})
        if share_cpu:
            options = options.model_copy(update={"allow_spinning": False})
        return backend.runner(self.entry.directory, options, self.precision)

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        """The engine's inputs: the model's, unless the graph passes changed them (folded preprocessing)."""
        graph_model = self.entry.directory / GRAPH_DIR / self.model.path.name
        return ModelFile.load(graph_model).inputs if graph_model.is_file() else self.model.inputs


def prepare_engine(
    model: Path | ModelFile,
    profile: DeviceProfile,
    precision: Precision | None = None,
    cache: EngineCache | None = None,
    facts: HostFacts | None = None,
    *,
    graph: GraphOptions | None = None,
    calibration: Calibration | None = None,
) -> PreparedEngine:
    """Validate arguments, then return the cached engine for this key or build it.

    `model` is an ONNX path, or a `ModelFile` the caller already loaded (so it is not read twice).
    `graph` says how the SDK's graph passes rewrite the model first (folded preprocessing, batch);
    the defaults still run them. `calibration` is required for int8 and ignored otherwise.
    """
    from edge_sdk.graph.options import GraphOptions

    started = time.perf_counter()
    precision = precision or profile.default_precision
    if precision not in profile.precisions:
        raise ConfigError(
            f"profile '{profile.name}' builds {', '.join(profile.precisions)}; got precision '{precision}'"
        )
    backend = get_backend(profile.engine.backend)
    builder = backend.builder()
    builder.check(profile.engine, precision)
    if precision == "int8" and calibration is None:
        raise ConfigError("precision int8 needs calibration data (edge-sdk build --calib DATA)")
    if precision != "int8":
        calibration = None
    graph = _with_profile_batch(graph or GraphOptions(), profile)
    graph = replace(graph, integer_resize=graph.integer_resize and exact_uint8_resize(profile))
    model = model if isinstance(model, ModelFile) else ModelFile.load(model)
    cache = cache or EngineCache()
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

    def build(out_dir: Path) -> dict[str, object]:
        log.info("building %s engine for %s (%s, %s)", backend.name, model.path.name, profile.name, precision)
        model.check()
        graph_model, graph_facts = _apply_graph_passes(model, graph, out_dir / GRAPH_DIR / model.path.name)
        build_facts = builder.build(graph_model, profile.engine, precision, out_dir, calibration)
        return {"model_path": str(model.path.resolve()), "graph_passes": graph_facts, **build_facts}

    entry, built = cache.get_or_build(key, build)
    return PreparedEngine(entry, model, profile, precision, built, time.perf_counter() - started)


INTEGER_RESIZE_PROVIDERS = frozenset({"cpu", "xnnpack"})
"""Providers whose uint8 NHWC bilinear Resize is exact (ONNX Runtime's CPU integer kernel; XNNPACK
leaves Resize to it). CUDA's is not (see graph/preprocess_folding.py); for the others it is unverified."""


def exact_uint8_resize(profile: DeviceProfile) -> bool:
    """Whether a folded resize may run on the raw uint8 NHWC frame for `profile`: only when every
    provider it may run on is a CPU one."""
    providers = getattr(profile.engine, "execution_providers", None)
    return providers is not None and all(p.type in INTEGER_RESIZE_PROVIDERS for p in providers)


def _with_profile_batch(graph: GraphOptions, profile: DeviceProfile) -> GraphOptions:
    """The profile's batch axis, unless the caller asked for one."""
    if graph.batch != "keep" or profile.batch == "keep":
        return graph
    return replace(graph, batch=None if profile.batch == "dynamic" else profile.batch)


def _apply_graph_passes(
    model: ModelFile, graph: GraphOptions, destination: Path
) -> tuple[ModelFile, list[dict[str, object]]]:
    import onnx

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
