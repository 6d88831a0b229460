"""The tails a worker serves: every cut of its pipelines' models, built for its own profile when an
edge first asks for one (`OffloadWorker`'s tail builder), and the useful ones built at start.

Part names are the edge's (`protocol.tail_part` of the crossing tensors): the worker cuts the same
graph (split_engines.py). Every prefix cut and the worker's own useful cuts are known by name; a cut
the edge chose otherwise (a minimum cut weighed by the edge's own per-layer profile) is found from
the tensors its request carries, which name the cut, and checked against the part name.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np

from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.profiles import DeviceProfile

from .partition import cut_points, measure_cuts
from .protocol import model_key, tail_part
from .split_engines import (
    SplitCandidate,
    SplitModel,
    candidate_of_tensors,
    head_outputs,
    prepare_split,
    sample_feed,
    split_candidates,
    split_model_of,
)
from .worker_models import TailRunner


@dataclass(frozen=True)
class SampledTail:
    """A tail's runner (an engine here, or a Triton model) with what its head sends for the shipped
    scene: its warm-up, which also times it for the load report (a tail's input sizes are open, so
    zeros of a fixed shape cannot)."""

    runner: TailRunner
    sample_feed: dict[str, np.ndarray]

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self.runner.inputs

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.runner.infer(feed)


class SplitTails:
    def __init__(
        self,
        pipelines: Sequence[PipelineConfig],
        profile: DeviceProfile,
        cache: EngineCache,
        threads: int | None = None,
    ):
        self.profile, self.cache, self.threads = profile, cache, threads
        self._pipelines = {model_key(cache.models.load(c.model.path).sha256, c.preprocess): c for c in pipelines}
        self._splits: dict[str, tuple[SplitModel, dict[str, SplitCandidate]]] = {}
        self._useful: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._stack = ExitStack()

    def __call__(self, key: str, part: str, tensors: Sequence[str] = ()) -> TailRunner | None:
        """The tail `part` of model `key`, open; None when no cut of it has that name (`tensors`: what the
        request for it carries, the cut's tensors)."""
        found = self._cuts(key)
        if found is None:
            return None
        split, candidates = found
        candidate = candidates.get(part)
        if candidate is None and tensors and tail_part(tensors) == part:
            candidate = candidate_of_tensors(split, tensors)
        if candidate is None:
            return None
        engine = prepare_split(split, candidate, "tail", self.profile, self.cache)
        runner = self._stack.enter_context(engine.open(threads=self.threads))
        return SampledTail(runner, head_outputs(split, candidate, scene_frames(1))[0])

    def useful(self, key: str) -> list[str]:
        """The parts an edge on this host's CPU picks with `cuts: auto` (they send less than every cut
        with less edge work, and their tails compute something)."""
        return [] if self._cuts(key) is None else self._useful[key]

    def close(self) -> None:
        self._stack.close()

    def _cuts(self, key: str) -> tuple[SplitModel, dict[str, SplitCandidate]] | None:
        with self._lock:
            if key not in self._splits:
                config = self._pipelines.get(key)
                if config is None:
                    return None
                split = split_model_of(config, self.cache)
                measured = measure_cuts(split.graph, cut_points(split.graph), sample_feed(split))
                parts = {tail_part(m.cut.tensors): SplitCandidate(tail_part(m.cut.tensors), m) for m in measured}
                candidates = split_candidates(split)
                parts |= {candidate.part: candidate for candidate in candidates}
                self._useful[key] = [candidate.part for candidate in candidates if not candidate.trivial_tail]
                self._splits[key] = (split, parts)
            return self._splits[key]
