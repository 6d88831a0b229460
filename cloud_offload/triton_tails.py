"""Split tails served by a Triton Inference Server: the tail of a cut written as an ONNX model for its
model repository (`edge-sdk offload export-tail`), and a worker's `--triton-tail PIPELINE:TENSOR=MODEL`,
which serves the tail of the cut at TENSOR (named by its largest tensor, as `offload.cuts` names it)
through that Triton model instead of building it here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edge_sdk.core.errors import ConfigError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.pipeline.config import PipelineConfig

from .partition import split_model
from .split_engines import SplitCandidate, head_outputs, split_candidates, split_model_of
from .triton_runner import TritonRunner, TritonSettings
from .worker_tails import SampledTail


def parse_tails(items: Sequence[str], pipelines: Sequence[PipelineConfig]) -> dict[str, dict[str, str]]:
    """--triton-tail PIPELINE:TENSOR=MODEL items as pipeline -> {tensor: Triton model}; ConfigError
    saying what is wrong with one."""
    names = [config.name for config in pipelines]
    tails: dict[str, dict[str, str]] = {}
    for item in items:
        target, sep, model = item.partition("=")
        pipeline, colon, tensor = target.partition(":")
        if not sep or not colon or not pipeline or not tensor or not model:
            raise ConfigError(f"--triton-tail: expected PIPELINE:TENSOR=MODEL, got {item!r}")
        if pipeline not in names:
            raise ConfigError(f"--triton-tail {item}: no pipeline named {pipeline!r} is served (pipelines: {names})")
        tails.setdefault(pipeline, {})[tensor] = model
    return tails


def triton_tails(
    config: PipelineConfig, cuts: dict[str, str], settings: TritonSettings, cache: EngineCache
) -> dict[str, tuple[str, SampledTail]]:
    """Part name -> (Triton model, its runner with what the head sends for the shipped scene: the
    worker's warm-up) for each cut of `cuts` (tensor -> Triton model), checked against the server now
    (TritonError naming the URL and model when it is not usable)."""
    split = split_model_of(config, cache)
    tails = {}
    for candidate in split_candidates(split, list(cuts)):
        tensor = next(name for name in cuts if name in candidate.measured.cut.tensors)
        runner = TritonRunner(settings, cuts[tensor], split.model.outputs)
        sample = head_outputs(split, candidate, scene_frames(1))[0]
        tails[candidate.part] = (cuts[tensor], SampledTail(runner, sample))
    return tails


def export_tail(config: PipelineConfig, tensor: str, cache: EngineCache, path: Path) -> SplitCandidate:
    """Write the tail of the cut at `tensor` (its largest tensor) to `path` as ONNX: the graph the worker
    would build for that part, for a Triton model repository."""
    split = split_model_of(config, cache)
    [candidate] = split_candidates(split, [tensor])
    _head, tail = split_model(split.graph, candidate.measured)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tail.SerializeToString())
    return candidate
