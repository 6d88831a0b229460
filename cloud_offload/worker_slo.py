"""The worker's `--latency-slo-ms`: each model loaded at start is checked against the target and timed at
every batch size its SloBatcher may run (edge_sdk/serving/batching.py), and those times seed the batcher
of each model, part and shape (worker_batches.SloBatchers) when its first request comes."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from edge_sdk.serving.batching import SloBatcher, SloUnreachable, batch_buckets

from .protocol import WHOLE, ModelTimes
from .worker_batches import BatchKey, SloBatchers
from .worker_models import ServedModel

log = logging.getLogger("cloud_offload.worker")


class WorkerSlo:
    def __init__(self, slo_ms: float, max_batch: int):
        self.slo_ms, self.max_batch = slo_ms, max_batch
        self.batchers = SloBatchers(slo_ms, max_batch, self._seed)
        self._batch_ms: dict[str, dict[int, float]] = {}
        self._times: Mapping[str, ModelTimes] = {}

    def prepare(self, loaded: Mapping[str, ServedModel], times: Mapping[str, ModelTimes]) -> None:
        """SloUnreachable naming the model when one request alone misses the target; else time every
        batch size of each loaded model (so none is met for the first time while requests wait)."""
        self._times = times
        for key, served in loaded.items():
            whole_ms = times[key].whole_ms if key in times else None
            if whole_ms is not None:
                batcher = SloBatcher(self.slo_ms, 1)
                batcher.ran(1, whole_ms)
                try:
                    batcher.check_reachable()
                except SloUnreachable as exc:
                    raise SloUnreachable(f"model {key}: {exc}") from None
            self._batch_ms[key] = served.time_batches(batch_buckets(self.max_batch))
            log.info(
                "offload worker: model %s batch ms %s",
                key,
                ", ".join(f"{size}: {ms:.1f}" for size, ms in self._batch_ms[key].items()),
            )

    def _seed(self, key: BatchKey) -> dict[int, float]:
        model_key, part, _shape = key
        if part == WHOLE:
            return self._batch_ms.get(model_key, {})
        tail_ms = self._times.get(model_key, ModelTimes()).tails_ms.get(part)
        return {1: tail_ms} if tail_ms is not None else {}
