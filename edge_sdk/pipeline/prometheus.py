"""Serve the runtime's counters as Prometheus metrics while a pipeline runs."""

from __future__ import annotations

from typing import Any

from edge_sdk.errors import BackendUnavailableError

from .runtime import RuntimeSnapshot


class PrometheusExporter:
    """Owns a private registry and an HTTP server on `address:port`; `update()` with each snapshot."""

    def __init__(self, port: int, address: str = "127.0.0.1"):
        try:
            import prometheus_client as prom
        except ImportError:
            raise BackendUnavailableError(
                "runtime.prometheus needs prometheus-client: pip install 'edge-sdk[metrics]'"
            ) from None
        self.registry = prom.CollectorRegistry()
        self._stage_fps = prom.Gauge(
            "edge_sdk_stage_fps", "Frames per second per stage", ["stage"], registry=self.registry
        )
        self._stage_busy = prom.Gauge(
            "edge_sdk_stage_busy_ratio", "Fraction of time a stage spends working", ["stage"], registry=self.registry
        )
        self._stage_frames = prom.Gauge(
            "edge_sdk_stage_frames", "Frames a stage handled since it (re)started", ["stage"], registry=self.registry
        )
        self._restarts = prom.Gauge("edge_sdk_stage_restarts", "Restarts of a stage", ["stage"], registry=self.registry)
        self._dropped = prom.Gauge(
            "edge_sdk_source_dropped_frames", "Frames dropped per source", ["source"], registry=self.registry
        )
        self._slots = prom.Gauge(
            "edge_sdk_ring_slots", "Frame ring slots by state", ["source", "state"], registry=self.registry
        )
        self._latency = prom.Gauge(
            "edge_sdk_latency_ms", "Capture-to-result latency over recent frames", ["quantile"], registry=self.registry
        )
        self._server: Any
        self._server, self._thread = prom.start_http_server(port, addr=address, registry=self.registry)
        self.port = port

    def update(self, snapshot: RuntimeSnapshot) -> None:
        for stage in snapshot.stages:
            self._stage_fps.labels(stage.name).set(stage.fps)
            self._stage_busy.labels(stage.name).set(stage.busy)
            self._stage_frames.labels(stage.name).set(stage.frames)
            self._restarts.labels(stage.name).set(stage.restarts)
        for source, states in snapshot.rings.items():
            self._dropped.labels(source).set(states.get("dropped", 0))
            for state, count in states.items():
                if state != "dropped":
                    self._slots.labels(source, state).set(count)
        self._latency.labels("0.5").set(snapshot.latency_p50_ms)
        self._latency.labels("0.99").set(snapshot.latency_p99_ms)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
