"""Live pipeline figures for operators: each running pipeline's runtime snapshot, as PipelineStats.

The runtime hands the agent a snapshot about every half second (`run_pipeline(on_snapshot=...)`);
the agent publishes at most one per `stats_interval_s` and pipeline to
`edge/<device>/telemetry/stats/<pipeline>` at QoS 0, not retained, and only while connected: a stale
frame rate is worth nothing after an outage, so none are kept for later. A pipeline run with
`runtime.mode: inline` makes no snapshots, so it publishes no stats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from edge_sdk.fleet.wire.telemetry import STATS, stats_message
from edge_sdk.mqtt import MqttError
from edge_sdk.mqtt.client_roles import PublishingClient
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.pipeline.snapshot import RuntimeSnapshot, StageView

log = logging.getLogger(__name__)


def result_stage(snapshot: RuntimeSnapshot) -> StageView | None:
    """The stage whose rate is the pipeline's result rate: the output stage (the sinks), else the last one."""
    for stage in reversed(snapshot.stages):
        if stage.kind == "output":
            return stage
    return snapshot.stages[-1] if snapshot.stages else None


def snapshot_stats(device: str, pipeline: str, snapshot: RuntimeSnapshot, at: float) -> bytes:
    """The encoded PipelineStats of `snapshot` (taken at `at`, seconds since the epoch)."""
    stage = result_stage(snapshot)
    dropped = sum(int(states.get("dropped", 0)) for states in snapshot.rings.values())
    return stats_message(
        device,
        pipeline,
        at=at,
        fps=min(stage.fps, 1e6) if stage is not None else 0.0,
        p50=snapshot.latency_p50_ms,
        p99=snapshot.latency_p99_ms,
        frames=stage.frames if stage is not None else 0,
        dropped=dropped,
    )


class StatsPublisher:
    """`publish(pipeline, snapshot)` for every snapshot of every pipeline (thread-safe; never raises)."""

    def __init__(
        self,
        client: PublishingClient,
        topics: DeviceTopics,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._client = client
        self._topics = topics
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._broken: set[str] = set()
        self.published = 0

    def publish(self, pipeline: str, snapshot: RuntimeSnapshot) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(pipeline)
            if last is not None and now - last < self._interval:
                return
            self._last[pipeline] = now
        if not self._client.is_connected:
            return
        try:
            payload = snapshot_stats(self._topics.device, pipeline, snapshot, time.time())
            self._client.publish(self._topics.telemetry(STATS, pipeline), payload, qos=0, retain=False, wait=False)
        except MqttError as exc:
            log.debug("stats of pipeline %s not published: %s", pipeline, exc)
            return
        except Exception:  # the runtime's supervision loop calls this: a bug here must not stop the pipeline
            if pipeline not in self._broken:
                self._broken.add(pipeline)
                log.exception("stats of pipeline %s cannot be published", pipeline)
            return
        self.published += 1
