"""Latency percentiles and throughput over a run."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LatencyRecorder:
    """Collects per-frame durations (milliseconds) by stage name."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, stage: str, milliseconds: float) -> None:
        self.samples.setdefault(stage, []).append(milliseconds)

    def percentile(self, stage: str, q: float) -> float:
        values = self.samples.get(stage)
        return float(np.percentile(values, q)) if values else float("nan")

    def mean(self, stage: str) -> float:
        values = self.samples.get(stage)
        return float(np.mean(values)) if values else float("nan")


@dataclass(frozen=True)
class RunSummary:
    frames: int
    seconds: float
    latency_p50_ms: float
    """Percentiles of the frames' latency (frame_steps.latency_ms): frame in hand -> result ready for the
    sinks, less the wait in the ring of a source that is read ahead (a file, a folder)."""
    latency_p99_ms: float
    stage_mean_ms: dict[str, float]
    """Per frame, the mean of each Result.timings_ms field but `batch` (that is `mean_batch`), and of
    `sinks` (the sinks' write); inline also `capture` (the source's read)."""
    sink_failures: dict[str, str]
    engine_built: bool
    engine_seconds: float
    dropped: dict[str, int] = field(default_factory=dict)
    """Frames dropped per source (live sources under load)."""
    frames_skipped: dict[str, int] = field(default_factory=dict)
    """Frames per source that could not be decoded and were passed over (`source.on_error: skip`)."""
    source_failures: dict[str, str] = field(default_factory=dict)
    """Sources that failed for good (a file that broke, a camera whose reconnect policy gave up), and why."""
    restarts: dict[str, int] = field(default_factory=dict)
    """Stages that were restarted, and how often."""
    mean_batch: float = 1.0
    """Frames per engine call, averaged over frames."""
    model_frames: dict[str, int] = field(default_factory=dict)
    """Frames per model that computed them ("primary", "fallback") when the pipeline has a `fallback:`."""

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "frames": self.frames,
            "seconds": round(self.seconds, 3),
            "fps": round(self.fps, 2),
            "latency_p50_ms": round(self.latency_p50_ms, 2),
            "latency_p99_ms": round(self.latency_p99_ms, 2),
            "stage_mean_ms": {k: round(v, 3) for k, v in self.stage_mean_ms.items()},
            "sink_failures": self.sink_failures,
            "dropped": self.dropped,
            "frames_skipped": self.frames_skipped,
            "source_failures": self.source_failures,
            "restarts": self.restarts,
            "mean_batch": round(self.mean_batch, 2),
            **({"model_frames": self.model_frames} if self.model_frames else {}),
            "engine_built": self.engine_built,
            "engine_seconds": round(self.engine_seconds, 3),
        }
