"""The run summary of the multi-process runtime, from the output stage's reports and the rings' counts."""

from __future__ import annotations

from typing import Any

import numpy as np

from .messages import StageReport
from .metrics import RunSummary


class OutputTally:
    """Latencies and per-stage timings the output stage reports, across its restarts."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.recent: list[float] = []
        """The last 500 latencies, for --stats."""
        self._extra: dict[str, Any] = {}
        self._earlier_sums: dict[str, float] = {}
        self._earlier_models: dict[str, int] = {}
        self._first_result_at: float | None = None

    def record(self, report: StageReport) -> None:
        self.latencies += report.latencies_ms
        self.recent = (self.recent + report.latencies_ms)[-500:]
        previous = self._extra
        if previous and previous.get("pid") != report.pid:  # a restarted output stage starts from zero
            for name, total in previous.get("timing_sums", {}).items():
                self._earlier_sums[name] = self._earlier_sums.get(name, 0.0) + total
            for model, count in previous.get("model_frames", {}).items():
                self._earlier_models[model] = self._earlier_models.get(model, 0) + count
            self._first_result_at = self._first_result_at or previous.get("first_result_at")
        self._extra = report.extra | {"pid": report.pid}

    def summary(
        self,
        counts: dict[str, dict[str, int]],
        *,
        source_failures: dict[str, str],
        restarts: dict[str, int],
        engine: tuple[bool, float],
        wall: float,
    ) -> RunSummary:
        """`counts`: per source, the ring's delivered, dropped and skipped frames (the truth, kept in
        shared memory across stage restarts); `engine`: (built now, seconds)."""
        extra = self._extra
        frames = sum(count["delivered"] for count in counts.values())
        first, last = self._first_result_at or extra.get("first_result_at"), extra.get("last_result_at")
        # FPS over the span of results, so process start-up does not count against throughput.
        seconds = (last - first) * frames / max(frames - 1, 1) if first and last and frames > 1 else wall
        sums = dict(self._earlier_sums)
        for name, total in extra.get("timing_sums", {}).items():
            sums[name] = sums.get(name, 0.0) + total
        models = dict(self._earlier_models)
        for model, count in extra.get("model_frames", {}).items():
            models[model] = models.get(model, 0) + count
        latencies = self.latencies or [float("nan")]
        return RunSummary(
            frames=frames,
            seconds=seconds,
            latency_p50_ms=float(np.percentile(latencies, 50)),
            latency_p99_ms=float(np.percentile(latencies, 99)),
            stage_mean_ms={name: total / frames for name, total in sums.items() if frames and name != "batch"},
            sink_failures=dict(extra.get("sink_failures", {})),
            engine_built=engine[0],
            engine_seconds=engine[1],
            dropped={name: count["dropped"] for name, count in counts.items()},
            frames_skipped={name: count["skipped"] for name, count in counts.items() if count["skipped"]},
            source_failures=dict(source_failures),
            restarts=restarts,
            mean_batch=(sums.get("batch", 0.0) / frames) if frames else 0.0,
            model_frames=models,
        )
