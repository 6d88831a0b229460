"""The head and tail engines of a split, built like any other engine: through `prepare_engine` for a
profile, with the equivalence gate, into the engine cache.

Both sides cut the same graph: the pipeline's model after the SDK's graph passes with the
preprocessing left outside (in split mode the edge preprocesses on the host and its head starts at
the model's own input), and the SSD head cut when the pipeline decodes boxes on the host. The passes
are deterministic, so an edge and a worker on different profiles agree on every cut and its part
name (`protocol.tail_part`) without exchanging a model.

The head's gate feeds it the shipped scene frames through the pipeline's preprocessing; the tail's
gate feeds it what the FP32 head computes from the same frames.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnx

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision
from edge_sdk.core.preprocess import Preprocessor
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.engines.equivalence import GateData, scene_frames, shipped_frames
from edge_sdk.graph.optimize import optimize_graph
from edge_sdk.graph.options import GraphOptions
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import pipeline_input
from edge_sdk.profiles.model import DeviceProfile

from .dag_cuts import min_cuts
from .node_profile import node_times_ms
from .partition import (
    Cut,
    MeasuredCut,
    computed_tensors,
    cut_points,
    head_cut,
    measure_cuts,
    measure_tensors,
    node_reads,
    producers_of,
    split_model,
    useful_cuts,
)
from .protocol import model_key, tail_part

Side = Literal["head", "tail"]
SPLITS_FOLDER = "splits"


@dataclass(frozen=True)
class SplitModel:
    """What both sides cut, and the facts a cut is chosen by."""

    config: PipelineConfig
    model: ModelFile
    key: str
    """protocol.model_key of the pipeline's model and preprocessing."""
    graph: onnx.ModelProto
    input: TensorMeta
    """The graph's input frames go to, after the pipeline's (host) preprocessing."""
    preprocess: Preprocessor


TRIVIAL_TAIL_SHARE = 0.1
"""A tail under this share of the model's time (its per-layer profile) computes too little to be worth
the link's round trip: the edge has done the work (the cut after a detector's NMS, 0 %, or inside its
box predictor, 5 %). Neither the agent nor the planner offers such a cut."""


@dataclass(frozen=True)
class SplitCandidate:
    part: str
    """The tail's part name on the wire."""
    measured: MeasuredCut
    tail_share: float | None = None
    """The tail's share of the whole model's time in the per-layer profile (node_profile.py); None unprofiled."""

    @property
    def trivial_tail(self) -> bool:
        return self.tail_share is not None and self.tail_share < TRIVIAL_TAIL_SHARE

    @property
    def name(self) -> str:
        """The mode's name for people and status events: split@<the largest crossing tensor>, and how
        many smaller ones travel with it."""
        others = len(self.measured.cut.tensors) - 1
        return f"split@{largest_tensor(self.measured)}" + (f"+{others}" if others else "")


def split_model_of(config: PipelineConfig, cache: EngineCache) -> SplitModel:
    model = cache.models.load(config.model.path)
    input_name = pipeline_input(config, model)
    decodes_on_host = config.postprocess.type == "ssd" and config.postprocess.decode == "sdk"
    graph, _reports = optimize_graph(
        onnx.load(str(model.path)), GraphOptions(input_name=input_name, ssd_split=decodes_on_host)
    )
    model_input = next(meta for meta in model.inputs if meta.name == input_name)
    host = config.preprocess.model_copy(update={"fold": False})
    return SplitModel(
        config, model, model_key(model.sha256, config.preprocess), graph, model_input, Preprocessor(host, model_input)
    )


def sample_feed(split: SplitModel, frame: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The graph's input for one frame (default: the shipped scene), preprocessed on the host."""
    image = frame if frame is not None else scene_frames(1)[0]
    return {split.input.name: split.preprocess(image)}


def split_candidates(split: SplitModel, wanted: Sequence[str] | None = None) -> list[SplitCandidate]:
    """The cuts worth considering: with `wanted` (tensor names), the cuts that send exactly one of
    them; else every cut that sends fewer bytes than each cut with less edge work and than the model's
    input. A chain's cuts are the prefixes of its node order; a branched model's also its minimum cuts
    (dag_cuts.py). The edge work is each head's time in the per-layer profile of the model on this
    host's CPU (node_profile.py), which also gives each tail's share (`SplitCandidate.trivial_tail`)."""
    cuts = cut_points(split.graph)
    if not cuts:
        return []
    feed = sample_feed(split)
    samples = measure_tensors(split.graph, feed, computed_tensors(split.graph))
    node_ms = node_times_ms(split.graph, feed)
    if any(len(cut.tensors) > 1 for cut in cuts):
        tensor_bytes = {name: sample.bytes for name, sample in samples.items()}
        cuts = _distinct([*cuts, *min_cuts(split.graph, node_ms, tensor_bytes)])
    measured = measure_cuts(split.graph, cuts, feed, samples)
    if wanted is None:
        chosen = useful_cuts(measured, sum(array.nbytes for array in feed.values()), node_ms)
    else:
        by_tensor: dict[str, MeasuredCut] = {}
        for m in measured:  # a cut is named by its largest tensor; the first cut that sends it
            by_tensor.setdefault(largest_tensor(m), m)
        missing = [name for name in wanted if name not in by_tensor]
        if missing:
            raise ConfigError(
                f"offload cuts: {', '.join(missing)} is not a tensor the model can be cut at "
                f"(`edge-sdk offload plan` lists the cuts)"
            )
        chosen = [by_tensor[name] for name in wanted]
    total = sum(node_ms) or 1.0
    return [
        SplitCandidate(tail_part(m.cut.tensors), m, 1 - sum(node_ms[i] for i in m.cut.head) / total) for m in chosen
    ]


def candidate_of_tensors(split: SplitModel, tensors: Sequence[str]) -> SplitCandidate | None:
    """The cut that sends exactly `tensors` (a request's, in its order), measured; None when no head of
    the model hands the rest of it exactly those."""
    graph = split.graph.graph
    computed = {out for node in graph.node for out in node.output}
    if not tensors or any(name not in computed for name in tensors):
        return None
    head = producers_of(split.graph, tensors)
    cut = head_cut(split.graph, head)
    inputs = {value.name for value in graph.input}
    tail_reads_input = any(node_reads(node) & inputs for index, node in enumerate(graph.node) if index not in head)
    if set(cut.tensors) != set(tensors) or tail_reads_input:
        return None
    cut = Cut(cut.head, tuple(tensors), cut.after)
    [measured] = measure_cuts(split.graph, [cut], sample_feed(split))
    return SplitCandidate(tail_part(cut.tensors), measured)


def _distinct(cuts: Sequence[Cut]) -> list[Cut]:
    """One cut per set of crossing tensors (the same tensors make the same head and tail), the first."""
    seen: dict[frozenset[str], Cut] = {}
    for cut in cuts:
        seen.setdefault(frozenset(cut.tensors), cut)
    return list(seen.values())


def prepare_split(
    split: SplitModel, candidate: SplitCandidate, side: Side, profile: DeviceProfile, cache: EngineCache
) -> PreparedEngine:
    """The head or tail engine of a cut for `profile`, from the cache or built and gated."""
    head, tail = split_model(split.graph, candidate.measured)
    path = _write_once(
        cache.root / SPLITS_FOLDER / split.key / candidate.part / f"{side}.onnx", head if side == "head" else tail
    )
    precision = _float_precision(split.config, profile)
    if side == "head":
        gate = GateData(shipped_frames, split.config.preprocess.model_copy(update={"fold": False}), split.input.name)
        return prepare_engine(path, profile, precision, cache, gate=gate)

    gate = GateData(shipped_frames, model_samples=lambda count: head_outputs(split, candidate, scene_frames(count)))
    return prepare_engine(path, profile, precision, cache, gate=gate)


def head_outputs(
    split: SplitModel, candidate: SplitCandidate, frames: Sequence[np.ndarray]
) -> list[dict[str, np.ndarray]]:
    """What the FP32 head sends for each frame (onnxruntime's CPU provider): a tail's sample input."""
    import onnxruntime

    head, _tail = split_model(split.graph, candidate.measured)
    session = onnxruntime.InferenceSession(head.SerializeToString(), providers=["CPUExecutionProvider"])
    names = list(candidate.measured.cut.tensors)
    return [dict(zip(names, session.run(names, sample_feed(split, frame)), strict=True)) for frame in frames]


def largest_tensor(measured: MeasuredCut) -> str:
    sizes = [
        int(np.prod(shape)) * np.dtype(dtype).itemsize
        for shape, dtype in zip(measured.shapes, measured.dtypes, strict=True)
    ]
    return measured.cut.tensors[int(np.argmax(sizes))]


def _float_precision(config: PipelineConfig, profile: DeviceProfile) -> Precision:
    """The pipeline's precision, or the profile's default; a split is built in float (an INT8 head
    would need its own calibration: not done yet)."""
    wanted = config.model.precision or profile.default_precision
    if wanted != "int8":
        return wanted
    floats = [p for p in profile.precisions if p != "int8"]
    if not floats:
        raise ConfigError(f"profile '{profile.name}' builds only int8; a split's head and tail are built in float")
    return floats[0]


def _write_once(path: Path, model: onnx.ModelProto) -> Path:
    """The same cut of the same graph is the same bytes: written once, atomically, then reused."""
    data = model.SerializeToString()
    if path.exists() and path.read_bytes() == data:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    os.replace(temporary, path)
    return path
